# name: content
printf 'id,name,price\n1,pen,1.5\n2,book,12\n3,lamp,30.25\n' | diff - items.csv
