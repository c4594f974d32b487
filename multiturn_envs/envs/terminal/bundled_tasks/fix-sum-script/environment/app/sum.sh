#!/bin/bash
total=0
while read -r n; do
  total=$n
done < "$1"
echo "$total"
