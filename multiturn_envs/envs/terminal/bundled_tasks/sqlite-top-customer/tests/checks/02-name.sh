# name: name
test "$(tr -d "\n" < top_customer.txt)" = Chen
