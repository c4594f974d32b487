# name: content
printf 'the 6\nwe 4\nshall 3\n' | diff - top3.txt
