# name: executable
test -x greet.sh
