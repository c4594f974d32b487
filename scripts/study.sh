#!/usr/bin/env bash
# The study in miniature (examples/study/study.py) over several seeds, then the spread of the
# headline: Pass@(1,T_max) on held-out maps, best RL arm - SFT base, with its paired 95% CI.
#   SEEDS="0 1 2" OUT=runs/study bash scripts/study.sh
# Each seed writes <OUT>/seed-<s>/report.md (PNGs beside it) and summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
out="${OUT:-runs/study}"
mkdir -p "$out"
for seed in ${SEEDS:-0}; do
  start=$SECONDS
  "$py" examples/study/study.py --out "$out/seed-$seed" --seed "$seed" 2>"$out/seed-$seed.log" \
    || { echo "study: seed $seed failed, see $out/seed-$seed.log" >&2; exit 1; }
  echo "study: seed $seed took $((SECONDS - start)) s" >&2
done
"$py" - "$out" ${SEEDS:-0} <<'PY'
import json, sys
from pathlib import Path
out, seeds = Path(sys.argv[1]), sys.argv[2:]
print("seed  best arm      Pass@(1,T_max) best - base [95% CI]   CI excludes 0")
for s in seeds:
    summary = json.loads((out / f"seed-{s}" / "summary.json").read_text())
    best = summary["best_arm"]
    d = summary["headline_pass1_tmax"][best]["diff"]
    print(f"{s:>4}  {best:<12}  {d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
          f"          {d['low'] > 0}")
PY
