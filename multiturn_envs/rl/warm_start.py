"""SFT warm start with TRL's ``SFTTrainer`` on the env expert's moves, in TRL's tool layout.

A small model that never solves a task gives GRPO no signal (every reward of a group equal).
This makes the "base" model of a comparison: the harness plays episodes with
``NoisyExpertPolicy(epsilon=error_share)`` (so a share of the visited states follow an error),
:class:`~multiturn_envs.harness.Replay` rebuilds each one, and every visited state becomes one
prompt-completion example: the conversation so far (observations as tool results) and, as the
completion, a call of the ``act`` tool with the **expert's** action in that state (so errors are
seen in the context, never imitated), plus one closing reply after the episode ended (unless
``closing=False``). The closing reply's context ends as GRPO shows an episode's end: the last
observation followed by :func:`~multiturn_envs.adapters.trl.end_note` (under a hidden budget
nothing else shows that the budget ran out). The examples go to ``SFTTrainer`` with the same
chat template and tool schema GRPO uses, and the loss covers the completion only.

**Frame weight.** A completion is mostly the call's fixed frame (the template's text around
the action, and EOS); the action is one or two tokens of it. With a plain token mean the
frame's easy tokens dominate the first steps, and Adam's second-moment estimate, built from
them, then keeps the action's steps small for hundreds of steps. ``frame_weight`` < 1 scales
the frame tokens' share of the loss (:func:`weighted_completion_loss`); the study's tiny
model learns its moves with 0.1 (docs/training.md has the figures).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from multiturn_envs.adapters.trl import end_note
from multiturn_envs.episode import EnvMaker
from multiturn_envs.rl.tool_format import (
    CLOSING_REPLY,
    ToolLayout,
    split_reply,
    tool_call_message,
)

__all__ = [
    "SFTReport",
    "expert_examples",
    "frame_token_ids",
    "sft_warm_start",
    "weighted_completion_loss",
]


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

    factory = make_env or EnvMaker(env_id, env_kwargs)
    examples: list[dict[str, Any]] = []
    records = eval_records(config, NoisyExpertPolicy(error_share), progress=False, make_env=factory)
    with Replay(factory) as replay:
        for record, episode in zip(records, replay.episodes(records)):
            for _ in episode.turns():
                context = layout.chat(episode.base.messages(), system, episode.base)
                expert = episode.base.expert_action()
                target = layout.call_message(expert, episode.base)
                examples.append({"prompt": context, "completion": [target]})
            if closing:
                context = layout.chat(episode.base.messages(), system, episode.base)
                note = end_note(bool(record["success"]), bool(record["truncated"]))
                context[-1] = {**context[-1], "content": f"{context[-1]['content']}\n\n{note}"}
                reply = {"role": "assistant", "content": CLOSING_REPLY}
                examples.append({"prompt": context, "completion": [reply]})
    return examples


def frame_token_ids(
    tokenizer: Any, tools: Sequence[Callable[..., Any]], tool_name: str = "act"
) -> list[int]:
    """The ids of a tool call's fixed frame: the template's text before and after the action,
    and EOS. Exact for a tokenizer that holds the frame as added tokens (the tiny model's,
    :func:`~multiturn_envs.rl.tiny_agent.tool_frames`); for another, the frame's tokens
    wherever they occur (an action token that also occurs in the frame counts as frame)."""
    sentinel = "Qz7SENTINELQz7"
    context = [{"role": "user", "content": "x"}]
    _, reply = split_reply(tokenizer, tools, context, tool_call_message(sentinel, tool_name))
    before, after = reply.split(sentinel)
    ids = set(tokenizer.encode(before, add_special_tokens=False))
    ids |= set(tokenizer.encode(after, add_special_tokens=False))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


def weighted_completion_loss(frame_ids: Sequence[int], frame_weight: float) -> Any:
    """``loss(outputs, labels)``: the mean token NLL over the completion (labels not -100),
    the frame's tokens weighted ``frame_weight``, every other token 1. With ``frame_weight=1``
    it is the plain token mean (the model's own loss)."""
    import torch

    frame = torch.tensor(list(frame_ids), dtype=torch.long)

    def loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
        logits = outputs.logits[:, :-1, :].float()
        target = labels[:, 1:].to(logits.device)
        mask = target != -100
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), target.clamp(min=0).reshape(-1), reduction="none"
        ).view_as(target)
        is_frame = torch.isin(target, frame.to(target.device))
        weight = torch.where(is_frame, frame_weight, 1.0) * mask
        return (nll * weight).sum() / weight.sum().clamp(min=1e-9)

    return loss


def _frame_weighted_trainer(frame_ids: Sequence[int], frame_weight: float) -> Any:
    """``SFTTrainer`` with :func:`weighted_completion_loss` (TRL's way: override
    ``compute_loss``; its ``compute_loss_func`` costs a second forward pass per step)."""
    from trl import SFTTrainer

    weighted = weighted_completion_loss(frame_ids, frame_weight)

    class FrameWeightedSFTTrainer(SFTTrainer):  # type: ignore[misc]
        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            features = {k: v for k, v in inputs.items() if k != "labels"}
            outputs = model(**features, use_cache=False)
            loss = weighted(outputs, inputs["labels"])
            return (loss, outputs) if return_outputs else loss

    return FrameWeightedSFTTrainer


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
    frame_weight: float = 1.0,
    extra: dict[str, Any] | None = None,
) -> SFTReport:
    """``SFTTrainer`` on ``examples`` (completion-only loss), in place on ``model``.

    ``frame_weight``: the weight of the call frame's tokens in the loss (module note; 1.0: the
    plain token mean). ``extra``: more ``SFTConfig`` fields, on top of ours (e.g.
    ``lr_scheduler_type``, ``warmup_steps``).
    """
    import time

    from datasets import Dataset
    from transformers import PrinterCallback
    from transformers.utils import get_json_schema
    from trl import SFTConfig, SFTTrainer

    if not examples:
        raise ValueError("no SFT examples: the expert played no turn")
    schema = json.dumps([get_json_schema(t) for t in tools])
    data = Dataset.from_list([{**e, "tools": schema} for e in examples])
    settings: dict[str, Any] = dict(
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
    args = SFTConfig(**{**settings, **(extra or {})})
    trainer_class: Any = SFTTrainer
    if frame_weight != 1.0:
        trainer_class = _frame_weighted_trainer(frame_token_ids(tokenizer, tools), frame_weight)
    start = time.perf_counter()
    model.train()
    trainer = trainer_class(model=model, args=args, train_dataset=data, processing_class=tokenizer)
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
