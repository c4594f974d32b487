# name: restored
test -z "$(git -C repo diff --name-only)"
