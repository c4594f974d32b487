# name: new source picked up
make -s clean >/dev/null && echo d > src/d.txt && make -s build >/dev/null && printf 'a\nb\nc\nd\n' | diff - out/all.txt
