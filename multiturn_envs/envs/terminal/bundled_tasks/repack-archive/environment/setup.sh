mkdir -p data/sub && echo keep > data/keep.txt && echo junk > data/x.tmp && echo also > data/sub/also.txt && echo junk > data/sub/y.tmp && tar --mtime=2024-01-01 -cjf data.tar.bz2 data && rm -rf data
