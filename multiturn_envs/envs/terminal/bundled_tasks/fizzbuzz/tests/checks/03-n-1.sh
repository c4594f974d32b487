# name: N=1
test "$(python3 fizzbuzz.py 1)" = 1
