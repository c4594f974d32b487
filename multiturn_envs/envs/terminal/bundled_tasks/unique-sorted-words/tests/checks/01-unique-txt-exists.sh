# name: unique.txt exists
test -f unique.txt
