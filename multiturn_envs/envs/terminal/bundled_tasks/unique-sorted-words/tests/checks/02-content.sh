# name: content
printf 'apple\nbanana\ncherry\nkiwi\n' | diff - unique.txt
