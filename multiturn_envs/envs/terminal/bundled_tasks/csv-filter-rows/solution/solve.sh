#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
awk -F, 'NR==1 || $2=="DE"' customers.csv > de.csv
