"""The trainer with the env's typed tools (``TrainConfig.tools="env"``): a tiny model SFT'd on
the expert's ``move`` calls trains with the process reward under GiGPO (per-turn credit from the
registry, turn spans aligned to the calls), and the harness evaluates it in the same layout:
the same system prompt and tool schemas, its calls as the actions, token ids continued, and a
reply without a call ending the episode as it ends a rollout in TRL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.testing import require_packages

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TASKS = ["random-s3-p0.8-n0", "random-s3-p0.8-n1"]


def _config(tmp: Path, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = {
        "env_kwargs": {"is_slippery": False},
        "train_tasks": TASKS,
        "model": "tiny",
        "tiny": {"vocab_size": 768},
        "tools": "env",
        "warm_start": "sft",
        "sft_steps": 60,
        "sft_episodes": 12,
        "sft_batch_size": 8,
        "sft_error_share": 0.25,
        "sft_learning_rate": 5e-3,
        "max_turns": 4,
        "steps": 1,
        "num_generations": 4,
        "batch_size": 8,
        "learning_rate": 1e-2,
        "temperature": 0.7,
        "max_completion_length": 512,
        "output_dir": str(tmp),
        "threads": 1,
    }
    base.update(kw)
    return TrainConfig.from_dict(base)


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_packages("trl", "torch", "transformers", "datasets")
    from multiturn_envs.rl.models import start_model

    folder = tmp_path_factory.mktemp("typed-start")
    return start_model(_config(folder), folder)


def test_process_reward_and_gigpo_train_with_typed_tools(start: Path, tmp_path: Path) -> None:
    from multiturn_envs.rl.trainer import MultiTurnGRPOTrainer
    from multiturn_envs.rl.training import train

    seen: dict[str, Any] = {}
    original = MultiTurnGRPOTrainer._gigpo

    def spy(self: Any, out: dict[str, Any], envs: list[Any]) -> dict[str, float]:
        figures = original(self, out, envs)
        seen["advantages"] = out["advantages"].clone()
        seen["calls"] = [m["content"] for e in envs for m in e.messages if m["role"] == "assistant"]
        return figures

    MultiTurnGRPOTrainer._gigpo = spy  # type: ignore[method-assign]
    try:
        config = _config(
            tmp_path, reward={"name": "process", "weight": 0.5}, advantage="gigpo",
            gigpo_step_reward={"name": "process", "weight": 0.5},
        )  # fmt: skip
        result = train(config, start=start, progress=False)
    finally:
        MultiTurnGRPOTrainer._gigpo = original  # type: ignore[method-assign]
    (entry,) = result.log
    assert entry["env/turns"] > 0, "no rollout called the move tool"
    assert seen["calls"] and all(c.startswith("<tool_call>") for c in seen["calls"])
    assert any('"name": "move"' in c for c in seen["calls"])
    assert entry["rewards/TRLEnvironment/mean"] == pytest.approx(entry["reward"])
    assert entry["reward"] == pytest.approx(entry["env/trajectory_reward"], abs=1e-5)
    assert seen["advantages"].dim() == 2  # per-turn advantages reached TRL's loss
    assert entry["gigpo/misaligned"] < 0.5  # one span per move call


def test_harness_evaluates_the_typed_model_in_its_training_layout(
    start: Path, tmp_path: Path
) -> None:
    import gymnasium as gym

    from multiturn_envs.harness import EvalConfig, read_run, run_eval, score_run
    from multiturn_envs.rl.evaluate import tool_layout_policy, tool_layout_scorer
    from multiturn_envs.rl.run_view import RunView

    config = _config(tmp_path)
    policy = tool_layout_policy(start, config, name="start", temperature=1.0)
    assert policy.prompter.tools and policy.prompter.native_tools
    assert policy.prompter.system_prompt == RunView.of(config).system_prompt
    path = tmp_path / "eval.jsonl"
    run_eval(
        EvalConfig(
            env_id=config.env_id,
            policy="start",
            tasks=TASKS,
            samples=4,
            max_turns=4,
            seed=0,
            env_kwargs=config.env_kwargs,
        ),
        policy,
        str(path),
        progress=False,
    )
    run = read_run(path)
    actions = [a for r in run.records for a in r["actions"]]
    assert actions and all(a.startswith("<tool_call>") for a in actions)
    later = [t for r in run.records for t in (r["turn_tokens"] or [])[1:]]
    assert all(t["prompt_continued"] for t in later)
    scorer = tool_layout_scorer(start, config, "start")

    def env() -> gym.Env[str, str]:
        return gym.make(config.env_id, max_turns=4, **config.env_kwargs)

    compared = 0
    for record, scored in zip(run.records, score_run(scorer, run, env)):
        for tokens, logprobs in zip(record["turn_tokens"] or [], scored.token_logprobs):
            if len(logprobs) != len(tokens["ids"]):
                break  # not the template's rendering of its call: later contexts differ
            assert logprobs == pytest.approx(tokens["logprobs"], abs=1e-4)
            compared += 1
    assert compared >= 4
