# name: default
test "$(./greet.sh)" = "Hello, world!"
