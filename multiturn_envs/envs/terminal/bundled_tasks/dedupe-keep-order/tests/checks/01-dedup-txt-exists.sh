# name: dedup.txt exists
test -f dedup.txt
