# name: two lines
test $(grep -c . app.env) = 2
