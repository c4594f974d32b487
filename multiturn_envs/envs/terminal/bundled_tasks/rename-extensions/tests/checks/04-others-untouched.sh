# name: others untouched
test -f photos/notes.txt
