# name: clean removes
make -s build >/dev/null && make -s clean >/dev/null && test ! -e out
