# name: contents
test "$(tar -xzOf backup.tar.gz docs/api/ref.md)" = reference
