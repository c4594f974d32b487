# name: hash
test "$(tr -d "\n" < typo_commit.txt)" = "$(git -C repo log --grep=typo --format=%H)"
