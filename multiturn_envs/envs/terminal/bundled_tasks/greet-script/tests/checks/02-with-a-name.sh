# name: with a name
test "$(./greet.sh Ada)" = "Hello, Ada!"
