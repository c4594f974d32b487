# name: message
test "$(git -C repo log -1 --format=%s)" = "Add notes"
