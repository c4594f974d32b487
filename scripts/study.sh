#!/usr/bin/env bash
# The main job: the study in miniature (examples/study/study.py). Sets up .venv, then per seed:
# an expert-SFT'd tiny base, GRPO arms through TRL (outcome, process reward, GiGPO, BudgetMix),
# every model evaluated on held-out FrozenLake maps with a hidden budget, and the analyses
# (Pass@(K,T) gap with CIs, same-state, error-state continuation, action NLL/LLR, training
# dynamics) in <OUT>/seed-<s>/report.md with its PNGs. Then the spread of the headline over
# seeds: Pass@(1,T_max) best RL arm - base, with its paired 95% CI.
#   bash scripts/study.sh                        # seed 0, in runs/study
#   SEEDS="0 1 2 3" OUT=runs/study bash scripts/study.sh
# A rerun reuses the stages a seed's folder holds that were made under the same config (the base,
# each arm, each evaluation) and redoes the others. JOBS=1 trains one arm at a time (default 2).
# PYTHON=/path/to/python skips the setup and runs with that interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
# set up unless .venv already has what the study imports (a rerun then needs no network)
if [ -z "${PYTHON:-}" ] && ! .venv/bin/python -c "import multiturn_envs, trl, matplotlib" \
    2>/dev/null; then
  bash scripts/setup.sh study
fi
py="${PYTHON:-.venv/bin/python}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
out="${OUT:-runs/study}"
mkdir -p "$out"
for seed in ${SEEDS:-0}; do
  start=$SECONDS
  "$py" examples/study/study.py --out "$out/seed-$seed" --seed "$seed" --jobs "${JOBS:-2}" \
    2>"$out/seed-$seed.log" \
    || { echo "study: seed $seed failed, see $out/seed-$seed.log" >&2; exit 1; }
  echo "study: seed $seed took $((SECONDS - start)) s; report: $out/seed-$seed/report.md" >&2
done
"$py" examples/study/spread.py "$out" ${SEEDS:-0} >"$out/spread.md"
cat "$out/spread.md"
