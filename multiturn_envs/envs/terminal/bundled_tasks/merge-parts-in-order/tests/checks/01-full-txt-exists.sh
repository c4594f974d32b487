# name: full.txt exists
test -f full.txt
