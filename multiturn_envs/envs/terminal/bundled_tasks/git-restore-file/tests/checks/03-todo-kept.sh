# name: todo kept
test -f repo/todo.txt
