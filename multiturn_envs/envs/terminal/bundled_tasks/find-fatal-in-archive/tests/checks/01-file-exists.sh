# name: file exists
test -f fatal.txt
