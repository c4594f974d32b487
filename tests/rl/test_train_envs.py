"""Every env trains through the same entry point: one real GRPO step each, tiny model.

DeepCoder-MT runs its tests in the Docker sandbox, InterCode-SQL in SQLite, BFCL in its
simulated backends. A tiny model, expert-SFT'd on one task of the env, takes real turns. The
test checks that the env's rewards are TRL's rewards, and that the step moved the weights.
Skips without trl (or Docker for DeepCoder) locally; fails under ``CI=true``.

GRPO learns only from a group whose rewards differ, so the start model must copy the expert's
call sometimes, not always. A fixed SFT step count lands there only for one init and seed (the
tiny model memorises one task's call within ~10 steps once it starts to), so the SFT runs in
short chunks until sampled replies to the task's first prompt are the expert's call in at
least a third of the samples (:func:`_sft_until_copying`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.testing import require_docker, require_packages

pytestmark = pytest.mark.timeout(1800)  # trains, or runs whole evaluations: long

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _first_task(env_id: str, env_kwargs: dict[str, Any]) -> str:
    import gymnasium as gym

    env = gym.make(env_id, disable_env_checker=True, **env_kwargs)
    try:
        return str(env.unwrapped.task_ids()[0])  # type: ignore[attr-defined]
    finally:
        env.close()


def _sft_until_copying(config: TrainConfig, folder: Path, *, chunk: int, most: int) -> Path:
    """A tiny model built for ``config`` (``model="tiny"``), SFT'd on the expert in chunks of
    ``chunk`` steps until 16 temperature-1 replies to the task's first prompt hold the expert's
    call at least 6 times (or ``most`` steps ran: then the test fails, saying so). Returns the
    model's folder (``folder/model``)."""
    import torch

    from multiturn_envs.rl.models import build_tiny, install_tool_template, load_model
    from multiturn_envs.rl.run_view import RunView
    from multiturn_envs.rl.tool_format import split_reply
    from multiturn_envs.rl.warm_start import expert_examples, sft_warm_start

    view = RunView.of(config)
    model, tokenizer = load_model(str(build_tiny(config, folder / "random", view)))
    install_tool_template(tokenizer, config.chat_template)
    tools = view.tool_functions()
    examples = expert_examples(
        config.env_id,
        dict(config.env_kwargs),
        config.train_tasks,
        episodes=2,
        max_turns=config.max_turns,
        system=view.system_prompt,
        layout=view.layout,
    )
    prompt, call = split_reply(
        tokenizer, tools, examples[0]["prompt"], examples[0]["completion"][0]
    )
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)] * 16)
    copies, steps = 0, 0
    while copies < 6:
        assert steps < most, f"after {steps} SFT steps the model copies the expert {copies}/16"
        sft_warm_start(
            model,
            tokenizer,
            examples,
            tools,
            output_dir=folder / "sft",
            steps=chunk,
            batch_size=4,
            learning_rate=1e-3,
            seed=steps,
        )
        steps += chunk
        torch.manual_seed(steps)
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                max_new_tokens=len(tokenizer.encode(call, add_special_tokens=False)) + 8,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        replies = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=False)
        copies = sum(call.strip() in reply for reply in replies)
    model_dir = folder / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir


@pytest.mark.parametrize(
    ("env_id", "env_kwargs", "task", "chunk"),
    [
        # SFT in chunks of `chunk` steps (lr 1e-3) until the model copies the expert sometimes
        ("MT/InterCode-SQL-v0", {}, None, 5),
        # a single-turn AST category: a multi-turn task's prompt (~26k characters of function
        # docs) makes even one SFT step of a CPU test take minutes
        ("MT/BFCL-v0", {"category": "simple_python"}, "simple_python_97", 10),
        ("MT/DeepCoder-v0", {"backend": "docker"}, "bundled/sum-two", 10),
    ],
)
def test_one_grpo_step_on_the_env(
    env_id: str, env_kwargs: dict[str, Any], task: str | None, chunk: int, tmp_path: Path
) -> None:
    require_packages("trl", "torch", "transformers", "datasets")
    if env_id == "MT/DeepCoder-v0":
        require_docker()
    from multiturn_envs.rl.models import load_model
    from multiturn_envs.rl.training import train

    common = {
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "train_tasks": [task or _first_task(env_id, env_kwargs)],
        "max_turns": 2,
        "threads": 1,
    }
    tiny = TrainConfig.from_dict(
        {**common, "model": "tiny", "tiny": {"vocab_size": 1024}, "warm_start": "sft"}
    )
    start = _sft_until_copying(tiny, tmp_path / "sft", chunk=chunk, most=40 * chunk)
    config = TrainConfig.from_dict(
        {
            **common,
            "model": str(start),
            "warm_start": "none",
            "reward": {"name": "process", "weight": 1.0},
            "steps": 2,
            "num_generations": 8,
            "batch_size": 8,
            "learning_rate": 1e-3,
            "temperature": 1.0,
            "max_completion_length": 384,
            "output_dir": str(tmp_path / "run"),
        }
    )
    result = train(config, progress=False)
    assert len(result.log) == 2
    for entry in result.log:
        assert entry["env/turns"] > 0, f"no rollout reached the env: {result.log}"
        # TRL's reward is the env's: outcome + 1.0 x mean step score, averaged over rollouts
        assert entry["reward"] == pytest.approx(entry["env/trajectory_reward"], abs=1e-5)
        assert entry["rewards/TRLEnvironment/mean"] == pytest.approx(entry["reward"], abs=1e-5)
    signal = [e for e in result.log if e["reward_std"] > 0]
    assert signal, f"every rollout of both steps got one reward {result.log[0]['reward']}"
    first, _ = load_model(str(start))
    final, _ = load_model(str(result.model_dir))
    import torch

    moved = [
        n
        for (n, a), (_, b) in zip(first.named_parameters(), final.named_parameters())
        if not torch.equal(a, b)
    ]
    assert moved, "rewards differed within a group but no weight moved"
