# name: gzip
gzip -t backup.tar.gz
