# name: total.txt exists
test -f total.txt
