# name: slice.txt exists
test -f slice.txt
