# name: out complete
test $(wc -l < out.txt) = 50
