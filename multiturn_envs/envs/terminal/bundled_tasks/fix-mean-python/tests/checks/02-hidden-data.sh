# name: hidden data
printf '1\n2\n' > /tmp/h.txt && test "$(python3 stats.py /tmp/h.txt)" = 1.50
