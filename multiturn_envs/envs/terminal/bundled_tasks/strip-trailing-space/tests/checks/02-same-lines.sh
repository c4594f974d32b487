# name: same lines
test $(wc -l < src/util.py) = 6
