# name: file exists
test -f top_customer.txt
