#!/usr/bin/env bash
# The main job: the study in miniature (examples/study/study.py), pooled over seeds. Sets up
# .venv, then per seed: an expert-SFT'd tiny base, the pre-registered RL arm (GRPO with outcome
# reward through TRL; ARMS=all adds process reward, GiGPO and BudgetMix), every model evaluated
# on held-out FrozenLake maps with a hidden budget, and the analyses (Pass@(K,T) gap with CIs,
# same-state, error-state continuation, action NLL/LLR, training dynamics) in
# <OUT>/seed-<s>/report.md with its PNGs. Then <OUT>/spread.md (examples/study/spread.py): the
# pre-registered conclusion pooled over the seeds and the held-out maps, every figure with its
# 95% interval, and every seed's figures.
#   bash scripts/study.sh                          # seeds 0-3 into runs/study, two side by side
#   SEEDS="0 1 2 3 4 5 6 7" OUT=runs/study8 bash scripts/study.sh
#   ARMS=all bash scripts/study.sh                 # all four arms (about twice the time)
#   THREADS=2 JOBS=1 bash scripts/study.sh         # two torch threads per seed, one seed at a time
# JOBS seeds run side by side (default 2, one torch thread each). A rerun reuses the stages a
# seed's folder holds that were made under the same config, float path and package versions
# (the base, each arm, each evaluation) and redoes the others.
# PYTHON=/path/to/python skips the setup and runs with that interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
# set up unless .venv already has what the study imports (a rerun then needs no network)
if [ -z "${PYTHON:-}" ] && ! .venv/bin/python -c "import multiturn_envs, trl, matplotlib" \
    2>/dev/null; then
  bash scripts/setup.sh study
fi
py="${PYTHON:-.venv/bin/python}"
# the study of this checkout: its package first on the path, whatever PYTHON has installed
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS="${THREADS:-${OMP_NUM_THREADS:-1}}" TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
out="${OUT:-runs/study}"
seeds="${SEEDS:-0 1 2 3}"
jobs="${JOBS:-2}"
mkdir -p "$out"
flags=()
[ -n "${ARMS:-}" ] && flags+=(--arms "$ARMS")
if [ -n "${THREADS:-}" ]; then
  flags+=(--threads "$THREADS")
  # threads that sleep while they wait: on a machine whose cores are taken, OpenMP's spinning
  # waits burned three times the CPU (how threads wait, not what they compute)
  export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
fi

run_seed() {
  local seed=$1 start=$SECONDS
  if "$py" examples/study/study.py --out "$out/seed-$seed" --seed "$seed" --jobs 1 \
      ${flags[@]+"${flags[@]}"} >"$out/seed-$seed.out" 2>"$out/seed-$seed.log"; then
    echo "study: seed $seed took $((SECONDS - start)) s; report: $out/seed-$seed/report.md" >&2
  else
    echo "study: seed $seed failed, see $out/seed-$seed.log" >&2
    return 1
  fi
}

start=$SECONDS
pids=()
for seed in $seeds; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  run_seed "$seed" &
  pids+=("$!")
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || exit 1
echo "study: all seeds took $((SECONDS - start)) s" >&2
# shellcheck disable=SC2086  # the seeds are words
"$py" examples/study/spread.py "$out" $seeds >"$out/spread.md"
cat "$out/spread.md"
