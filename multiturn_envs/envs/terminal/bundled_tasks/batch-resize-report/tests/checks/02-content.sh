# name: content
printf 'a.txt 3\nb.txt 1\nc.txt 5\n' | diff - report.txt
