# name: content
printf 'player,score\neve,120\nbob,99\nann,87\ndan,9\n' | diff - sorted.csv
