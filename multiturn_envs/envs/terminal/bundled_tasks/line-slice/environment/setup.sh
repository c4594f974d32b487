seq 100 200 > numbers.txt
