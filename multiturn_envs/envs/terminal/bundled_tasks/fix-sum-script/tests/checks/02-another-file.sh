# name: another file
printf "5\n-2\n100\n" > /tmp/other.txt && test "$(bash sum.sh /tmp/other.txt)" = 103
