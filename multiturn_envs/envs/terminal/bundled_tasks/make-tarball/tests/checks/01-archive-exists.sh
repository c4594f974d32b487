# name: archive exists
test -f backup.tar.gz
