# name: top3.txt exists
test -f top3.txt
