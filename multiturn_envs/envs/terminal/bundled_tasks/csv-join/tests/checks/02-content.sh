# name: content
printf 'id,name,age\n1,ann,31\n2,bob,45\n4,dan,27\n' | diff - people.csv
