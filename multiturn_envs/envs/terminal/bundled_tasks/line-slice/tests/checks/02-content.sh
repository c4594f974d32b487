# name: content
seq 109 119 | diff - slice.txt
