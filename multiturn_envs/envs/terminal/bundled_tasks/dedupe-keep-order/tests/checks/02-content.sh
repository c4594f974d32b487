# name: content
printf 'web1\ndb1\nweb2\ncache1\n' | diff - dedup.txt
