# name: another name
test "$(./greet.sh "Grace Hopper")" = "Hello, Grace Hopper!"
