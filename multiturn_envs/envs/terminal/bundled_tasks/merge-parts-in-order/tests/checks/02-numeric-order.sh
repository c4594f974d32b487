# name: numeric order
for i in $(seq 1 12); do echo "chunk $i"; done | diff - full.txt
