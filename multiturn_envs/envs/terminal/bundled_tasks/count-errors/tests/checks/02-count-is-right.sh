# name: count is right
test "$(tr -d " \n" < error_count.txt)" = 3
