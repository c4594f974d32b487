# name: sorted.csv exists
test -f sorted.csv
