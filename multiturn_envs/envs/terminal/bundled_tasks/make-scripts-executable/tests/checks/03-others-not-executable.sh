# name: others not executable
test ! -x scripts/README && test ! -x scripts/lib/data.txt
