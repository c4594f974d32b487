# name: dir mode
test "$(stat -c %a secrets)" = 700
