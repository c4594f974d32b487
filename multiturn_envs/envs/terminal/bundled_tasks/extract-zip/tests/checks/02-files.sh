# name: files
test "$(cat extracted/readme.txt)" = hello && test "$(cat extracted/conf/app.conf)" = "port=1"
