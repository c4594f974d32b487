# name: count
test "$(tr -d " \n" < count.txt)" = 50
