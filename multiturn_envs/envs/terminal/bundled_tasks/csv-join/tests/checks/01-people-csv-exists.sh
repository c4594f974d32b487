# name: people.csv exists
test -f people.csv
