# name: zip exists
test -f data.zip && unzip -tq data.zip >/dev/null
