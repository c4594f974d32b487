# name: directory
test -d extracted
