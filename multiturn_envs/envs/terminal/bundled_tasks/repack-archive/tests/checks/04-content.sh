# name: content
test "$(unzip -p data.zip data/sub/also.txt)" = also
