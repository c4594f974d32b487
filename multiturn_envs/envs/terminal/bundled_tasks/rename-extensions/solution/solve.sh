#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
cd photos
# --- next turn ---
for f in *.jpeg; do mv -- "$f" "${f%.jpeg}.jpg"; done
# --- next turn ---
cd /app
