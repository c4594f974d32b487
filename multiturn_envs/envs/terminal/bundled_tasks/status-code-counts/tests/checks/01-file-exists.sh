# name: file exists
test -f status_counts.txt
