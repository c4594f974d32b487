#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
mkdir -p /tmp/re && tar -xjf data.tar.bz2 -C /tmp/re
# --- next turn ---
cd /tmp/re && rm -f /app/data.zip && zip -q -r /app/data.zip data -x '*.tmp'
# --- next turn ---
cd /app
