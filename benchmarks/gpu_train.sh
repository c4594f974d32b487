#!/usr/bin/env bash
# GPU training at the study's scale: GRPO through TRL (vLLM generation, colocated) on each env
# with a Qwen3-4B-class model, from examples/train/gpu/<env>-qwen3-4b.json.
#   MODEL=/path/to/Qwen3-4B STEPS=20 bash benchmarks/gpu_train.sh [frozenlake intercode-sql ...]
# MODEL: a local Hugging Face folder (machines here reach no hub). STEPS overrides the configs'
# steps (default: the configs' 200); OUT the runs' root (default runs/gpu). Each env writes
# <OUT>/<env>/train_log.jsonl (one line per step) and checkpoints every save_steps; rerun with
# RESUME=1 to continue from the latest checkpoint. DeepCoder needs Docker and the sandbox image
# (multiturn-envs sandbox build).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MODEL:?set MODEL to a local Qwen3-4B-class folder}"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
python -c "import vllm" || { echo "gpu_train: needs vllm (pip install 'multiturn-envs[vllm]')" >&2; exit 2; }
envs=("$@")
[ ${#envs[@]} -gt 0 ] || envs=(frozenlake intercode-sql bfcl deepcoder)
out="${OUT:-runs/gpu}"
for env in "${envs[@]}"; do
  extra=(--model "$MODEL" --output-dir "$out/$env")
  [ -n "${STEPS:-}" ] && extra+=(--steps "$STEPS")
  [ -n "${RESUME:-}" ] && extra+=(--resume-checkpoint)
  start=$SECONDS
  python -m multiturn_envs.cli train --config "examples/train/gpu/$env-qwen3-4b.json" "${extra[@]}"
  echo "gpu_train: $env done in $((SECONDS - start)) s" >&2
done
