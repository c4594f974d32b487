#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
for f in docs/*.txt; do echo "$(basename "$f") $(wc -w < "$f")"; done | sort > report.txt
