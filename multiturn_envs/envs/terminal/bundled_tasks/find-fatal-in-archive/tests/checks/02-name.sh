# name: name
test "$(tr -d "\n" < fatal.txt)" = worker-3.log
