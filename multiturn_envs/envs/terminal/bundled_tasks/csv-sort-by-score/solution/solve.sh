#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
{ head -n 1 scores.csv; tail -n +2 scores.csv | sort -t, -k2,2nr; } > sorted.csv
