#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
tr -cs 'A-Za-z' '\n' < speech.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -3 | awk '{print $2, $1}' > top3.txt
