#!/usr/bin/env bash
# docs/cli.md is generated from the parsers; fail (with the fix) when it is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -m multiturn_envs.cli.docs | diff -u docs/cli.md - >/dev/null; then
  echo "docs/cli.md is stale: .venv/bin/python -m multiturn_envs.cli.docs > docs/cli.md" >&2
  exit 1
fi
