# name: active.txt exists
test -f active.txt
