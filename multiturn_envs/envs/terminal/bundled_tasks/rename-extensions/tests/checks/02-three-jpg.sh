# name: three .jpg
test $(ls photos | grep -c '\.jpg$') = 3
