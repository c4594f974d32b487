#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
awk '{print $9}' access.log | sort | uniq -c | awk '{print $2, $1}' > status_counts.txt
