# name: relative target
test "$(readlink current)" = releases/v2
