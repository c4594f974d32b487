# name: content
printf 'data/a/big1.bin\ndata/b/c/big2.bin\ndata/big3.log\n' | diff - big.txt
