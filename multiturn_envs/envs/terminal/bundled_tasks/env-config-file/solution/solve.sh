#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
n=$(wc -l < hosts.txt)
# --- next turn ---
printf "APP_MODE=production\nAPP_WORKERS=%s\n" "$n" > app.env
