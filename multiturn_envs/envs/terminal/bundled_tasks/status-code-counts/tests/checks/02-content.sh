# name: content
printf '200 9\n301 2\n404 3\n500 2\n' | diff - status_counts.txt
