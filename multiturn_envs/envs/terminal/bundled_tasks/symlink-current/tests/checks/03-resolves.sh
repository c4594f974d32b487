# name: resolves
test "$(cat current/VERSION)" = 2.0.0
