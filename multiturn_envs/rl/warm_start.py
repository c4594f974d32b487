"""SFT warm start with TRL's ``SFTTrainer`` on the env expert's moves, in TRL's tool layout.

A small model that never solves a task gives GRPO no signal (every reward of a group equal).
This makes the "base" model of a comparison: the harness plays episodes with
``NoisyExpertPolicy(epsilon=error_share)`` (so a share of the visited states follow an error),
:class:`~multiturn_envs.harness.Replay` rebuilds each one, and every visited state becomes one
prompt-completion example: the conversation so far (observations as tool results) and, as the
completion, a call of the ``act`` tool with the **expert's** action in that state (so errors are
seen in the context, never imitated), plus one closing reply after the episode ended (unless
``closing=False``). The examples go to ``SFTTrainer`` with the same chat template and tool
schema GRPO uses, and the loss covers the completion only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from multiturn_envs.rl.tool_format import CLOSING_REPLY, ToolLayout


@dataclass
class SFTReport:
    """What the warm start did: examples, optimiser steps, first and last training loss."""

    examples: int
    steps: int
    first_loss: float
    last_loss: float
    seconds: float


def expert_examples(
    env_id: str,
    env_kwargs: dict[str, Any],
    tasks: Sequence[str],
    *,
    episodes: int,
    max_turns: int,
    system: str,
    error_share: float = 0.0,
    seed: int = 0,
    make_env: Callable[[], gym.Env[str, str]] | None = None,
    tool_name: str = "act",
    closing: bool = True,
    layout: ToolLayout | None = None,
) -> list[dict[str, Any]]:
    """Prompt-completion examples (TRL's conversational format) from harness-played episodes.

    ``episodes`` are spread over ``tasks`` (at least one sample each); the harness plays them in
    memory (no record file) with ``NoisyExpertPolicy(error_share)`` and a hidden budget.
    ``closing``: add the closing reply after each episode's end. ``layout``: the generic
    ``tool_name`` tool (default) or the env's typed tools.
    """
    layout = layout or ToolLayout(tool_name=tool_name)
    from multiturn_envs.harness import EvalConfig, Replay, eval_records
    from multiturn_envs.policies import NoisyExpertPolicy

    samples = max(1, -(-episodes // len(tasks)))
    config = EvalConfig(
        env_id=env_id,
        policy=f"noisy-expert:{error_share:g}",
        tasks=list(tasks),
        samples=samples,
        max_turns=max_turns,
        seed=seed,
        env_kwargs=dict(env_kwargs),
    )

    def build() -> gym.Env[str, str]:
        return gym.make(env_id, disable_env_checker=True, **env_kwargs)

    factory = make_env or build
    examples: list[dict[str, Any]] = []
    records = eval_records(config, NoisyExpertPolicy(error_share), progress=False, make_env=factory)
    with Replay(factory) as replay:
        for episode in replay.episodes(records):
            for _ in episode.turns():
                context = layout.chat(episode.base.messages(), system, episode.base)
                expert = episode.base.expert_action()
                target = layout.call_message(expert, episode.base)
                examples.append({"prompt": context, "completion": [target]})
            if closing:
                context = layout.chat(episode.base.messages(), system, episode.base)
                reply = {"role": "assistant", "content": CLOSING_REPLY}
                examples.append({"prompt": context, "completion": [reply]})
    return examples


def sft_warm_start(
    model: Any,
    tokenizer: Any,
    examples: Sequence[dict[str, Any]],
    tools: Sequence[Callable[..., Any]],
    *,
    output_dir: str | Path,
    steps: int,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    seed: int = 0,
    use_cpu: bool = True,
) -> SFTReport:
    """``SFTTrainer`` on ``examples`` (completion-only loss), in place on ``model``."""
    import time

    from datasets import Dataset
    from transformers import PrinterCallback
    from transformers.utils import get_json_schema
    from trl import SFTConfig, SFTTrainer

    if not examples:
        raise ValueError("no SFT examples: the expert played no turn")
    schema = json.dumps([get_json_schema(t) for t in tools])
    data = Dataset.from_list([{**e, "tools": schema} for e in examples])
    args = SFTConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        completion_only_loss=True,
        packing=False,
        max_length=None,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=max(1, steps // 20),
        report_to="none",
        save_strategy="no",
        use_cpu=use_cpu,
        seed=seed,
        dataset_num_proc=None,
        disable_tqdm=True,
    )
    start = time.perf_counter()
    model.train()
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # the report below sums it up
    trainer.train()
    model.eval()
    losses = [float(e["loss"]) for e in trainer.state.log_history if "loss" in e]
    return SFTReport(
        examples=len(examples),
        steps=steps,
        first_loss=losses[0] if losses else float("nan"),
        last_loss=losses[-1] if losses else float("nan"),
        seconds=time.perf_counter() - start,
    )
