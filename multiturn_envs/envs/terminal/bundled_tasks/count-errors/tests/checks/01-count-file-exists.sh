# name: count file exists
test -f error_count.txt
