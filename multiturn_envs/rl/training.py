"""``train(config)``: GRPO through TRL's trainer on any MT/* env, from a :class:`TrainConfig`.

The steps, each a function so the study and tests reuse them:

1. :meth:`RunView.of <multiturn_envs.rl.run_view.RunView.of>` asks the run's env once what
   TRL's rollouts see (tasks, system prompt, tools, the TRL environment class, how to make the
   env: fixed T, or ``BudgetMix``); the frozen view goes to every step below;
2. :func:`~multiturn_envs.rl.models.start_model` loads or builds the start model (``tiny``,
   ``smollm2``, a folder), with a tool-capable chat template, and warm-starts it (format or
   expert SFT) when asked;
3. :func:`train_rows` makes the GRPO dataset (one row per group: task, seed);
4. :func:`train` checks the output folder (a folder of someone else's files, or of another
   run, is refused before a byte is written: :func:`check_output_dir`), then runs
   :class:`~multiturn_envs.rl.trainer.MultiTurnGRPOTrainer` with checkpoints every
   ``save_steps``, resume (:mod:`~multiturn_envs.rl.checkpoints`), a progress line, and
   ``train_log.jsonl`` (one line per step: TRL's figures plus trajectory reward, success and
   mean step score); every TRL environment it made is closed when it returns or fails;
5. :func:`train_many` trains several runs from one start, side by side in worker processes.

Everything TRL-specific passes through ``GRPOConfig`` (``config.trl``), so a GPU run with vLLM
generation or PEFT is the same code with other settings.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from multiturn_envs.adapters.trl import grpo_rows
from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.rl.checkpoints import (
    CONFIG_FILE,
    FINAL,
    LOG_FILE,
    check_output_dir,
    resume_checkpoint,
)
from multiturn_envs.rl.config import MAX_STEPS, TrainConfig
from multiturn_envs.rl.models import cuda_available, load_model, start_model
from multiturn_envs.rl.run_view import Environments, RunView
from multiturn_envs.untrusted import Fields, load_json, parse_json, read_text

MAX_STATE_BYTES = 256 << 20
"""A resumed run's ``trainer_state.json`` and ``train_log.jsonl`` (its folder may be anyone's)."""

__all__ = ["TrainResult", "grpo_settings", "reply_cap_key", "train", "train_many", "train_rows"]


def train_rows(config: TrainConfig, view: RunView | None = None) -> list[dict[str, Any]]:
    """One row per GRPO group: tasks in a seeded shuffled cycle, a distinct reset seed each.

    A step samples ``batch_size`` x ``gradient_accumulation_steps`` rollouts (TRL generates for
    the whole accumulated batch at once), i.e. that many / ``num_generations`` rows. ``view``:
    the run's (default: asked now).
    """
    view = view if view is not None else RunView.of(config)
    accumulate = int(config.trl.get("gradient_accumulation_steps", 1))
    groups = config.steps * config.batch_size * accumulate // config.num_generations
    tasks = list(view.tasks)
    rng = np.random.default_rng(config.seed)
    order: list[str] = []
    while len(order) < groups:
        order += [tasks[int(i)] for i in rng.permutation(len(tasks))]
    return grpo_rows(
        config.env_id,
        order[:groups],
        seeds=[config.seed * 100_003 + i for i in range(groups)],
        tools=config.tools,
        system_prompt=view.system_prompt,
    )


@dataclass
class TrainResult:
    """Where the run's model is, its per-step log, and how long it took."""

    model_dir: Path
    log: list[dict[str, float]]
    seconds: float


def _progress_callback(total: int, log_path: Path, stream: Any) -> Any:
    from transformers import TrainerCallback

    class StepLog(TrainerCallback):  # type: ignore[misc]
        """One line per step on ``stream``; every log entry to ``train_log.jsonl``."""

        def __init__(self) -> None:
            self.start = time.perf_counter()
            self.first_step: int | None = None

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not logs or "reward" not in logs:
                return
            entry = {"step": int(state.global_step), **{k: float(v) for k, v in logs.items()}}
            with log_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
            if stream is None:
                return
            if self.first_step is None:
                self.first_step = int(state.global_step) - 1
            done = int(state.global_step) - self.first_step
            per = (time.perf_counter() - self.start) / max(done, 1)
            stream.write(
                f"step {state.global_step}/{total}  reward {logs.get('reward', 0):.3f}  "
                f"success {logs.get('env/success', 0):.2f}  "
                f"step score {logs.get('env/step_score', 0):.3f}  "
                f"turns {logs.get('env/turns', 0):.1f}  {per:.1f} s/step  "
                f"eta {per * (total - int(state.global_step)):.0f} s\n"
            )
            stream.flush()

    return StepLog()


def _trim_log(log_path: Path, checkpoint: str | None) -> None:
    """Keep the log lines of the steps a resumed checkpoint holds (none for a fresh run)."""
    if not log_path.exists():
        return
    kept: list[str] = []
    if checkpoint is not None:
        state_file = Path(checkpoint) / "trainer_state.json"
        state = Fields(load_json(state_file, max_bytes=MAX_STATE_BYTES), where=str(state_file))
        done = state.integer("global_step", default=0, minimum=0, maximum=MAX_STEPS) or 0
        for step, line in _log_steps(log_path):
            if step <= done:
                kept.append(line + "\n")
    log_path.write_text("".join(kept))


def _log_steps(log_path: Path) -> list[tuple[int, str]]:
    """``(step, line)`` of each entry of a run's ``train_log.jsonl`` (read within bounds, each
    line a JSON object with an int ``step``, or a ``ValueError`` naming the line)."""
    out = []
    text = read_text(log_path, max_bytes=MAX_STATE_BYTES)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{log_path}: line {number}"
        step = Fields(parse_json(line, where=where), where=where).integer(
            "step", default=None, minimum=0, maximum=MAX_STEPS
        )
        if step is None:
            raise UntrustedInputError(f"{where}: no 'step'")
        out.append((step, line))
    return out


def grpo_settings(config: TrainConfig, *, cuda: bool = False) -> dict[str, Any]:
    """The ``GRPOConfig`` fields of a run: ours from ``config``, then ``config.trl`` on top.

    ``max_turn_tokens`` becomes the per-call generation cap: ``max_new_tokens`` for
    transformers' ``generate``, ``max_tokens`` for vLLM's ``SamplingParams`` (which rejects the
    other name; a vLLM server would drop it silently). TRL calls the generator once per reply,
    so either caps a reply; TRL's own ``max_completion_length`` caps the whole rollout.
    """
    settings: dict[str, Any] = {
        "output_dir": config.output_dir,
        "max_steps": config.steps,
        "per_device_train_batch_size": config.batch_size,
        "num_generations": config.num_generations,
        "max_completion_length": config.max_completion_length,
        "max_tool_calling_iterations": config.max_budget,
        "learning_rate": config.learning_rate,
        "temperature": config.temperature,
        "beta": config.beta,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "steps" if config.save_steps else "no",
        "save_steps": config.save_steps or 500,
        "use_cpu": not cuda,
        "bf16": cuda,
        "gradient_checkpointing": False,
        "seed": config.seed,
        "shuffle_dataset": False,
        "disable_tqdm": True,
    }
    generation = dict(config.trl.get("generation_kwargs") or {})
    if config.max_turn_tokens:
        generation[reply_cap_key(config)] = config.max_turn_tokens
    settings.update({k: v for k, v in config.trl.items() if k != "generation_kwargs"})
    if generation:
        settings["generation_kwargs"] = generation
    return settings


def reply_cap_key(config: TrainConfig) -> str:
    """The generation keyword that caps one reply under this run's generator."""
    return "max_tokens" if config.trl.get("use_vllm") else "max_new_tokens"


def train(
    config: TrainConfig,
    *,
    resume: bool | str = False,
    progress: bool = True,
    start: str | Path | None = None,
) -> TrainResult:
    """Run GRPO as configured; return the final model's folder and the per-step log.

    Args:
        config: the run.
        resume: ``True`` continues from the latest checkpoint of ``config.output_dir`` (the
            folder's ``train_config.json`` must match), a path from that checkpoint.
        progress: print one line per step on stderr.
        start: a ready start model folder (skips building and warm start; the study shares one
            SFT base between arms).
    """
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from multiturn_envs.rl.trainer import MultiTurnGRPOTrainer

    t0 = time.perf_counter()
    out = Path(config.output_dir)
    checkpoint = resume_checkpoint(config, resume)
    check_output_dir(config)  # before a byte is written: the folder is ours, or empty
    if config.threads:
        torch.set_num_threads(config.threads)
    view = RunView.of(config)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2))
    say = (lambda text: print(text, file=sys.stderr)) if progress else None
    if start is not None:
        start_dir = Path(start)
    elif checkpoint is not None and (out / "start" / "model").is_dir():
        start_dir = out / "start" / "model"
    else:
        start_dir = start_model(config, out / "start", say, view=view)
    model, tokenizer = load_model(str(start_dir))
    model.train()
    log_path = out / LOG_FILE
    _trim_log(log_path, checkpoint)
    settings = grpo_settings(config, cuda=cuda_available())
    with Environments(view) as environments:
        trainer = MultiTurnGRPOTrainer(
            model=model,
            processing_class=tokenizer,
            args=GRPOConfig(**settings),
            train_dataset=Dataset.from_list(train_rows(config, view)),
            environment_factory=environments,
            advantage=config.advantage,
            gigpo_step_weight=config.gigpo_step_weight,
            gigpo_gamma=config.gigpo_gamma,
            step_reward=config.make_step_reward(),
            callbacks=[
                _progress_callback(config.steps, log_path, sys.stderr if progress else None)
            ],
        )
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # our progress line and log replace its dicts
        trainer.train(resume_from_checkpoint=checkpoint)
    final = out / FINAL
    trainer.model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    log = [json.loads(line) for _, line in _log_steps(log_path)]
    return TrainResult(final, log, time.perf_counter() - t0)


def _train_from(config: dict[str, Any], start: str, threads: int) -> TrainResult:
    """One run of :func:`train_many`, in a worker process (module level so it pickles)."""
    run = TrainConfig.from_dict(config)
    if not run.threads:  # the run's own setting wins; its saved config stays as given
        import torch

        torch.set_num_threads(threads)
    return train(run, start=start, progress=False)


def train_many(
    configs: dict[str, TrainConfig],
    start: str | Path,
    *,
    jobs: int = 1,
    done: Callable[[str, TrainResult], None] | None = None,
) -> dict[str, TrainResult]:
    """Train several runs from one ready start model, ``jobs`` at a time in worker processes.

    The study's arms share an SFT base and nothing else; on a 2-core machine two tiny-model arms
    side by side, one torch thread each, take about the time of one. A run whose ``threads``
    is 0 gets ``cores // jobs`` in a worker, so workers do not oversubscribe the CPU. Each run
    seeds itself (TRL's ``seed``), so it gives the same model alone, here or beside another.
    ``done(name, result)`` is called as each run finishes. The first failure cancels the runs
    not yet started, waits for those running, and raises ``RuntimeError`` naming its run (runs
    already finished keep their ``final/`` folders). Workers are spawned (a forked torch can
    hang), so a script that calls this needs the usual ``if __name__ == "__main__":`` guard.
    ``jobs <= 1`` trains in this process, in order.
    """
    names = list(configs)
    results: dict[str, TrainResult] = {}
    if jobs <= 1 or len(names) <= 1:
        for name in names:
            results[name] = train(configs[name], start=start, progress=False)
            if done is not None:
                done(name, results[name])
        return results
    workers = min(jobs, len(names))
    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {
            pool.submit(_train_from, configs[n].to_dict(), str(start), threads): n for n in names
        }
        for future in as_completed(futures):
            name = futures[future]
            try:
                results[name] = future.result()
            except Exception as exc:
                pool.shutdown(wait=True, cancel_futures=True)
                raise RuntimeError(f"training run {name!r} failed: {exc}") from exc
            if done is not None:
                done(name, results[name])
    return {n: results[n] for n in names}
