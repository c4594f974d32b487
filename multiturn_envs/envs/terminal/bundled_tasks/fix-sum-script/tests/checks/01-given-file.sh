# name: given file
test "$(bash sum.sh nums.txt)" = 60
