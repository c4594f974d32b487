"""Error-state continuation: how often a policy recovers from an injected error state.

Episodes start in an error state made by :class:`multiturn_envs.wrappers.ErrorInjection`
(``error_after`` expert steps, then one wrong action); the success rate of the policy's
continuation is reported with a bootstrap interval over tasks. The episodes run through the
reference runner (:func:`~multiturn_envs.harness.rollout.run_eval`), so they get the same
seeds, records and batching as any evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from multiturn_envs.harness.bootstrap import DEFAULT_N_BOOT, Interval, intervals
from multiturn_envs.harness.executors import Executor
from multiturn_envs.harness.passk import PassSurface, pass_surface_from_first_success
from multiturn_envs.harness.records import in_task_order, read_run
from multiturn_envs.harness.replay import EnvFactory, budget_stack
from multiturn_envs.harness.rollout import run_eval
from multiturn_envs.harness.run_config import EvalConfig
from multiturn_envs.policies.base import AsyncPolicy, Policy, as_policy

__all__ = ["ContinuationResult", "continuation_difference", "error_state_continuation"]


@dataclass(frozen=True)
class ContinuationResult:
    """Success of a policy continuing from injected error states.

    ``success_rate`` is the mean over tasks of each task's success share (tasks weigh equally,
    as in Pass@k), with a percentile bootstrap over tasks. ``skipped_tasks`` lists tasks where
    no error state could be reached (too short for ``k`` expert steps) and why.
    """

    policy: str
    error_after: int
    samples: int
    max_turns: int
    seed: int
    alpha: float
    n_boot: int
    success_rate: Interval
    per_task_success: dict[str, float]
    skipped_tasks: dict[str, str]
    episodes: list[dict[str, Any]] = field(repr=False)

    @property
    def n_episodes(self) -> int:
        return len(self.episodes)

    def surface(self) -> PassSurface:
        """Pass@(K,T) of the continuation (T counts the policy's turns after the error)."""
        turns: dict[str, list[int | None]] = {task: [] for task in self.per_task_success}
        for ep in self.episodes:
            turns[ep["task_id"]].append(ep["first_success_turn"])
        return pass_surface_from_first_success(turns, t_max=self.max_turns)

    def to_dict(self, include_episodes: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "error_state_continuation",
            "policy": self.policy,
            "error_after": self.error_after,
            "samples": self.samples,
            "max_turns": self.max_turns,
            "seed": self.seed,
            "alpha": self.alpha,
            "n_boot": self.n_boot,
            "n_tasks": len(self.per_task_success),
            "n_episodes": self.n_episodes,
            "success_rate": self.success_rate.to_dict(),
            "per_task_success": dict(self.per_task_success),
            "skipped_tasks": dict(self.skipped_tasks),
        }
        if include_episodes:
            out["episodes"] = list(self.episodes)
        return out

    def format(self) -> str:
        level = f"{100 * (1 - self.alpha):g}%"
        lines = [
            f"error-state continuation: {self.policy}, error after {self.error_after} "
            f"expert step(s), {self.max_turns} turns to recover",
            f"  {len(self.per_task_success)} tasks x {self.samples} samples "
            f"({self.n_episodes} episodes), {level} bootstrap CI over tasks",
            f"  success rate                       {self.success_rate.format()}",
        ]
        if self.skipped_tasks:
            lines.append(f"  skipped tasks (no error state)     {len(self.skipped_tasks)}")
        return "\n".join(lines)


def _probe_injection(
    make_env: EnvFactory, task_ids: Sequence[str], error_after: int, max_turns: int, seed: int
) -> dict[str, str]:
    """Tasks where ``error_after`` expert steps plus one error cannot leave a live state, with
    why."""
    skipped: dict[str, str] = {}
    raw = make_env()
    try:
        env = budget_stack(raw, max_turns, "hidden", error_after)
        for task in task_ids:
            try:
                env.reset(seed=seed, options={"task_id": task})
            except RuntimeError as exc:
                skipped[task] = str(exc)
    finally:
        raw.close()
    return skipped


def error_state_continuation(
    make_env: EnvFactory,
    policy: Policy | AsyncPolicy | Callable[[str], str],
    task_ids: Sequence[str],
    error_after: int,
    samples: int,
    max_turns: int,
    seed: int = 0,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    out: str | Path | None = None,
    in_flight: int = 64,
    executor: Executor | str | None = None,
) -> ContinuationResult:
    """Run ``samples`` episodes per task from an injected error state; report the success rate.

    Every episode is ``ErrorInjection(TurnBudget(env, max_turns), after_expert_steps=k)``: ``k``
    expert actions and one ``error_action`` are played as history (not counted against the
    budget), then the policy has ``max_turns`` turns. Episodes run through the reference runner
    with a hidden budget, one batched policy call per turn.

    Args:
        make_env: builds a fresh (unwrapped or budget-free) env.
        policy: a policy or a plain callable.
        task_ids: the tasks; those too short for ``k`` are skipped and listed.
        error_after: expert steps before the injected error.
        samples: episodes per task.
        max_turns: the policy's budget after the error.
        seed: the run seed (episode seeds derive from it and the task id).
        n_boot, alpha: the bootstrap over tasks.
        out: keep the trajectory records in this JSONL file (resumable); default: in memory only.
        in_flight: episodes in flight (the largest policy batch).
        executor: where the episodes run, as for ``run_eval`` (``None``: here; a
            ``RayExecutor``: sharded over Ray workers, the same records).
    """
    if isinstance(error_after, bool) or not isinstance(error_after, int):
        raise TypeError(f"error_after must be an int, got {error_after!r}")
    tasks = [str(t) for t in task_ids]
    if not tasks:
        raise ValueError("error_state_continuation needs at least one task")
    pol = as_policy(policy)
    skipped = _probe_injection(make_env, tasks, error_after, max_turns, seed)
    usable = [t for t in tasks if t not in skipped]
    if not usable:
        first = next(iter(skipped.values()))
        raise ValueError(f"no task admits an error after {error_after} expert steps: {first}")
    probe = make_env()
    try:
        env_id = probe.spec.id if probe.spec is not None else type(probe.unwrapped).__name__
    finally:
        probe.close()
    config = EvalConfig(
        env_id=env_id,
        policy=pol.name,
        tasks=usable,
        samples=samples,
        max_turns=max_turns,
        budget_mode="hidden",
        error_after=error_after,
        seed=seed,
    )
    summary = run_eval(
        config,
        pol,
        None if out is None else str(out),
        in_flight=in_flight,
        progress=False,
        make_env=make_env,
        executor=executor,
    )
    records = summary.records if summary.records is not None else read_run(summary.path).records
    records = in_task_order(records, usable)
    by_task: dict[str, list[bool]] = {t: [] for t in usable}
    episodes = []
    for rec in records:
        if rec["task_id"] not in by_task:
            continue
        by_task[rec["task_id"]].append(bool(rec["success"]))
        injection = rec.get("error_injection")
        episodes.append(
            {
                "task_id": rec["task_id"],
                "sample": rec["sample"],
                "seed": rec["seed"],
                "success": bool(rec["success"]),
                "first_success_turn": rec["first_success_turn"],
                "turns": rec["turns"],
                "injected_actions": None if injection is None else injection["injected_actions"],
                "actions": rec["actions"],
            }
        )
    per_task = {t: float(np.mean(v)) for t, v in by_task.items() if v}
    ci = intervals({"success_rate": np.array(list(per_task.values()))}, n_boot, alpha, seed)[
        "success_rate"
    ]
    return ContinuationResult(
        policy=pol.name,
        error_after=error_after,
        samples=samples,
        max_turns=max_turns,
        seed=seed,
        alpha=alpha,
        n_boot=n_boot,
        success_rate=ci,
        per_task_success=per_task,
        skipped_tasks=skipped,
        episodes=episodes,
    )


def continuation_difference(
    a: ContinuationResult,
    b: ContinuationResult,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """Paired bootstrap interval of ``success(A) - success(B)`` over their common tasks."""
    common = [t for t in a.per_task_success if t in b.per_task_success]
    if not common:
        raise ValueError("the two continuation results share no task")
    diff = np.array([a.per_task_success[t] - b.per_task_success[t] for t in common])
    return intervals({"diff": diff}, n_boot, alpha, seed)["diff"]
