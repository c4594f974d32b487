# name: content
printf 'name,country,since\nAnna,DE,2019\nJonas,DE,2022\n' | diff - de.csv
