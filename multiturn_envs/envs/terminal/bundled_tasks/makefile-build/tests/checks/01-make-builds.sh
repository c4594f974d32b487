# name: make builds
make -s >/dev/null && printf 'a\nb\nc\n' | diff - out/all.txt
