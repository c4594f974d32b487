# name: file modes
test -z "$(find secrets -type f ! -perm 600)" && test $(find secrets -type f | wc -l) = 2
