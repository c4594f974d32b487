# name: N=100 length
test $(python3 fizzbuzz.py 100 | wc -l) = 100
