#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
mkdir -p /tmp/logs && tar -xzf logs.tar.gz -C /tmp/logs
# --- next turn ---
grep -rl FATAL /tmp/logs | xargs -n1 basename > fatal.txt
