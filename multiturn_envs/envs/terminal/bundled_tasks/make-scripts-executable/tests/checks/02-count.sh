# name: count
test $(find scripts -name '*.sh' -perm -u+x | wc -l) = 3
