# name: content
printf 'ada\ngrace\n' | diff - active.txt
