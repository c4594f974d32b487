#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
find data -type f -size +1024c | sort > big.txt
