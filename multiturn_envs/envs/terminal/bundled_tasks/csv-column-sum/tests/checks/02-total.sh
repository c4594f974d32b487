# name: total
test "$(tr -d " \n" < total.txt)" = 1234
