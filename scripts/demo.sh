#!/usr/bin/env bash
# The main job: set up, evaluate a baseline on FrozenLake under Pass@(K,T), write the report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
out="${OUT:-runs/demo}"
mkdir -p "$out"
.venv/bin/multiturn-envs eval MT/FrozenLake-v0 --env-arg map_name=4x4 --env-arg is_slippery=true \
  --policy random --tasks 20 --samples 16 --max-turns 16 --seed 0 --out "$out/random.jsonl"
.venv/bin/multiturn-envs eval MT/FrozenLake-v0 --env-arg map_name=4x4 --env-arg is_slippery=true \
  --policy noisy-expert:0.3 --tasks 20 --samples 16 --max-turns 16 --seed 0 --out "$out/noisy-expert.jsonl"
.venv/bin/multiturn-envs report "$out/noisy-expert.jsonl" "$out/random.jsonl" --out-dir "$out"
echo "demo: records and report in $out"
