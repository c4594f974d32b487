"""Every env trains through the same entry point: one real GRPO step each, tiny model.

DeepCoder-MT runs its tests in the Docker sandbox, InterCode-SQL in SQLite, BFCL in its
simulated backends. A tiny model, expert-SFT'd on one task of the env, takes real turns. The
test checks that the env's rewards are TRL's rewards, and that the step moved the weights.
Skips without trl (or Docker for DeepCoder) locally; fails under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.testing import require

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _docker_ready() -> str | None:
    try:
        from multiturn_envs.sandbox.engine import docker_unavailable
    except ImportError as exc:
        return f"the docker pool ({exc})"
    return docker_unavailable()


def _first_task(env_id: str, env_kwargs: dict[str, Any]) -> str:
    import gymnasium as gym

    env = gym.make(env_id, disable_env_checker=True, **env_kwargs)
    try:
        return str(env.unwrapped.task_ids()[0])  # type: ignore[attr-defined]
    finally:
        env.close()


@pytest.mark.parametrize(
    ("env_id", "env_kwargs", "task", "sft_steps"),
    [
        # SFT steps: enough that the tiny model copies the task's expert action sometimes, not
        # always (all-equal rewards give GRPO no signal); measured on this machine
        ("MT/InterCode-SQL-v0", {}, None, 80),
        # a single-turn AST category: a multi-turn task's prompt (~26k characters of function
        # docs) makes even one SFT step of a CPU test take minutes
        ("MT/BFCL-v0", {"category": "simple_python"}, "simple_python_97", 200),
        ("MT/DeepCoder-v0", {"backend": "docker"}, "bundled/sum-two", 400),
    ],
)
def test_one_grpo_step_on_the_env(
    env_id: str, env_kwargs: dict[str, Any], task: str | None, sft_steps: int, tmp_path: Path
) -> None:
    for name in ("trl", "torch", "transformers", "datasets"):
        require(importlib.util.find_spec(name) is not None, f"the Python package {name!r}")
    if env_id == "MT/DeepCoder-v0":
        problem = _docker_ready()
        require(problem is None, f"a docker engine with the sandbox image ({problem})")
    from multiturn_envs.rl.train import load_model, train

    config = TrainConfig.from_dict(
        {
            "env_id": env_id,
            "env_kwargs": env_kwargs,
            "train_tasks": [task or _first_task(env_id, env_kwargs)],
            "model": "tiny",
            "tiny": {"vocab_size": 1024},
            "warm_start": "sft",
            "sft_episodes": 2,
            "sft_steps": sft_steps,
            "sft_batch_size": 4,
            "sft_learning_rate": 1e-2,
            "max_turns": 2,
            "reward": "process",
            "step_weight": 1.0,
            "steps": 2,
            "num_generations": 8,
            "batch_size": 8,
            "learning_rate": 1e-2,
            "temperature": 1.0,
            "max_completion_length": 384,
            "output_dir": str(tmp_path),
            "threads": 1,
        }
    )
    result = train(config, progress=False)
    assert len(result.log) == 2
    for entry in result.log:
        assert entry["env/turns"] > 0, "no rollout reached the env"
        # TRL's reward is the env's: outcome + 1.0 x mean step score, averaged over rollouts
        assert entry["reward"] == pytest.approx(entry["env/trajectory_reward"], abs=1e-5)
        assert entry["rewards/TRLEnvironment/mean"] == pytest.approx(entry["reward"], abs=1e-5)
    signal = [e for e in result.log if e["reward_std"] > 0]
    assert signal, f"every rollout of both steps got one reward {result.log[0]['reward']}"
    start, _ = load_model(str(tmp_path / "start" / "model"))
    final, _ = load_model(str(result.model_dir))
    import torch

    moved = [
        n
        for (n, a), (_, b) in zip(start.named_parameters(), final.named_parameters())
        if not torch.equal(a, b)
    ]
    assert moved, "rewards differed within a group but no weight moved"
