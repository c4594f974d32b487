# name: items.csv exists
test -f items.csv
