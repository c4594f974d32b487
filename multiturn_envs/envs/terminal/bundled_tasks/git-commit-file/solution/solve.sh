#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
cd repo
# --- next turn ---
git add notes.md
# --- next turn ---
git commit -q -m 'Add notes'
# --- next turn ---
cd /app
