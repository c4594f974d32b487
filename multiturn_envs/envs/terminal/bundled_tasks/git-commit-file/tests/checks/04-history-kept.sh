# name: history kept
test $(git -C repo rev-list --count HEAD) = 2
