#!/bin/bash
# Harbor's verifier entry point: runs every check in /tests/checks (a check passes when it
# exits with status 0) from the task's working directory and writes the share that passes to
# /logs/verifier/reward.txt. multiturn-envs reads the checks themselves (each one's exit status,
# as its checker observes it) rather than this file.
mkdir -p /logs/verifier
total=0
passed=0
for check in /tests/checks/*.sh; do
  total=$((total + 1))
  if (cd /app && bash "$check") >/dev/null 2>&1; then
    passed=$((passed + 1))
  fi
done
awk -v p="$passed" -v t="$total" 'BEGIN { printf "%s\n", (t ? p / t : 0) }' > /logs/verifier/reward.txt
