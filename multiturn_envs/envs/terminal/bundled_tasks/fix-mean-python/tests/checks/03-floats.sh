# name: floats
printf '0.5\n1.0\n' > /tmp/f.txt && test "$(python3 stats.py /tmp/f.txt)" = 0.75
