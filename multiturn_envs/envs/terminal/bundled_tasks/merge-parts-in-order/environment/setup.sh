mkdir -p parts && for i in $(seq 1 12); do echo "chunk $i" > parts/part$i.txt; done
