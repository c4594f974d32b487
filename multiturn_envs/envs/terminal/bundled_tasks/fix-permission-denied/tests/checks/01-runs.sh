# name: runs
test "$(/app/bin/report)" = "report ok"
