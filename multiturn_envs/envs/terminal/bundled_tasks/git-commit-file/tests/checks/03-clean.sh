# name: clean
test -z "$(git -C repo status --porcelain)"
