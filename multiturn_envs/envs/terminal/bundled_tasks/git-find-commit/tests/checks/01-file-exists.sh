# name: file exists
test -f typo_commit.txt
