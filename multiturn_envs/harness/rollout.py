"""``run_eval``: run N tasks x K samples of a policy under a turn budget, records streamed.

The public entry point of an evaluation. It picks the executor (this process, :mod:`.executors`,
or Ray workers, :mod:`.ray_executor`), each of which runs the local runner (:mod:`.runner`,
where the design of a run is described) and writes the records to one JSONL file
(:mod:`.records`), resumable, or keeps them in memory (``out=None``). What a run is (config,
episodes, seeds) lives in :mod:`.config`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from multiturn_envs.harness.config import RunOptions, RunSummary
from multiturn_envs.harness.executors import Executor, resolve_executor
from multiturn_envs.harness.records import TrajectoryRecord
from multiturn_envs.harness.run_config import EvalConfig
from multiturn_envs.policies.base import AsyncPolicy, Policy, as_policy

__all__ = ["eval_records", "run_eval"]


def run_eval(
    config: EvalConfig,
    policy: Policy | AsyncPolicy | Callable[[str], str],
    out: str | None = None,
    *,
    executor: Executor | str | None = None,
    **options: Any,
) -> RunSummary:
    """Run every episode of ``config`` that ``out`` does not hold yet; append their records.

    Args:
        config: what to run (written as the file's header).
        policy: a sync :class:`Policy`, an :class:`AsyncPolicy`, or a plain function
            ``fn(observation) -> str`` (adapted by
            :class:`~multiturn_envs.policies.base.CallablePolicy`, named after the function),
            as :func:`~.same_state.same_state_comparison` takes it.
        out: the JSONL record file (created, or resumed when it exists and ``resume``);
            ``None``: no file, the records come back in memory as ``RunSummary.records``
            (equal to what ``read_run`` would give for the file).
        executor: ``None``/``"local"`` (this process), ``"ray"`` or an executor object such as
            :class:`~multiturn_envs.harness.ray_executor.RayExecutor` (docs/scale-out.md), which
            shards the episodes over workers; ``in_flight`` and ``workers`` are then per worker.
        **options: how it runs, the fields of
            :class:`~multiturn_envs.harness.config.RunOptions` (``in_flight``, ``workers``,
            ``resume``, ``overwrite``, ``progress``, ``fsync_interval_s``, ``make_env``), which
            says what each means and holds their defaults.
    """
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(RunOptions)})
    if unknown:
        raise TypeError(f"run_eval got unknown run options {unknown} (RunOptions lists them)")
    run_options = RunOptions(**options)
    return resolve_executor(executor).run(config, as_policy(policy), out, run_options)


def eval_records(
    config: EvalConfig,
    policy: Policy | AsyncPolicy | Callable[[str], str],
    *,
    executor: Executor | str | None = None,
    **options: Any,
) -> list[TrajectoryRecord]:
    """The records of every episode of ``config``, kept in memory: :func:`run_eval` without a
    file, for callers that want the trajectories rather than a record file (``options`` as
    there; ``resume`` and ``overwrite`` mean nothing without a file)."""
    records = run_eval(config, policy, None, executor=executor, **options).records
    if records is None:
        raise TypeError(f"the executor {executor!r} wrote a file instead of keeping the records")
    return records
