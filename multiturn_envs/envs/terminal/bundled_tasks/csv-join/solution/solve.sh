#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
{ echo id,name,age; join -t, <(tail -n +2 names.csv | sort -t, -k1,1) <(tail -n +2 ages.csv | sort -t, -k1,1); } > people.csv
