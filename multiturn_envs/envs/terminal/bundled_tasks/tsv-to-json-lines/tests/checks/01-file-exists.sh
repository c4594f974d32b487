# name: file exists
test -f events.jsonl
