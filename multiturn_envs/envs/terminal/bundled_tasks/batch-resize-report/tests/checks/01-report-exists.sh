# name: report exists
test -f report.txt
