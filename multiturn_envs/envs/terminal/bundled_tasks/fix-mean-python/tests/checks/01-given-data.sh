# name: given data
test "$(python3 stats.py data.txt)" = 2.50
