# name: de.csv exists
test -f de.csv
