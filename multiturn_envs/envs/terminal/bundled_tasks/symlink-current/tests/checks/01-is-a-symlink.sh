# name: is a symlink
test -L current
