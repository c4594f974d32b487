# name: big.txt exists
test -f big.txt
