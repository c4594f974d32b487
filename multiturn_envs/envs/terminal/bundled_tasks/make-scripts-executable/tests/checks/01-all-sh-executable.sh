# name: all .sh executable
test -z "$(find scripts -name '*.sh' ! -perm -u+x)"
