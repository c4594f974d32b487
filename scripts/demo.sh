#!/usr/bin/env bash
# The main job: set up, evaluate two baselines on FrozenLake under Pass@(K,T), write the report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
out="${OUT:-runs/demo}"
mkdir -p "$out"
common=(MT/FrozenLake-v0 --tasks 20 --samples 16 --max-turns 16 --seed 0)
.venv/bin/multiturn-envs eval "${common[@]}" --policy noisy-expert:0.3 --out "$out/noisy-expert.jsonl"
.venv/bin/multiturn-envs eval "${common[@]}" --policy random --out "$out/random.jsonl"
.venv/bin/multiturn-envs report "$out/noisy-expert.jsonl" "$out/random.jsonl" --ks 1,2,4,8,16 \
  --ts 2,4,6,8,12,16 --out-dir "$out"
echo "demo: records and report in $out"
