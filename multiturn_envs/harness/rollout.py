"""``run_eval``: run N tasks x K samples of a policy under a turn budget, records streamed.

The public entry point of an evaluation. It picks the executor (this process, :mod:`.executors`,
or Ray workers, :mod:`.ray_executor`), each of which runs the local runner (:mod:`.runner`,
where the design of a run is described) and writes the records to one JSONL file
(:mod:`.records`), resumable. What a run is (config, episodes, seeds) lives in :mod:`.config`.
"""

from __future__ import annotations

from multiturn_envs.harness.config import EvalConfig, RunOptions, RunSummary, episode_seeds
from multiturn_envs.harness.executors import Executor, resolve_executor
from multiturn_envs.harness.runner import EnvFactory
from multiturn_envs.policies.base import AsyncPolicy, Policy

__all__ = ["EvalConfig", "RunSummary", "episode_seeds", "run_eval"]


def run_eval(
    config: EvalConfig,
    policy: Policy | AsyncPolicy,
    out: str,
    *,
    in_flight: int = 64,
    workers: int = 1,
    resume: bool = True,
    overwrite: bool = False,
    progress: bool | None = None,
    fsync_interval_s: float = 1.0,
    make_env: EnvFactory | None = None,
    executor: Executor | str | None = None,
) -> RunSummary:
    """Run every episode of ``config`` that ``out`` does not hold yet; append their records.

    Args:
        config: what to run (written as the file's header).
        policy: a sync :class:`Policy` or an :class:`AsyncPolicy`.
        out: the JSONL record file (created, or resumed when it exists and ``resume``).
        in_flight, workers, resume, overwrite, progress, fsync_interval_s, make_env: how it
            runs (:class:`~multiturn_envs.harness.config.RunOptions` says what each means).
        executor: ``None``/``"local"`` (this process), ``"ray"`` or an executor object such as
            :class:`~multiturn_envs.harness.ray_executor.RayExecutor` (docs/scale-out.md), which
            shards the episodes over workers; ``in_flight`` and ``workers`` are then per worker.
    """
    options = RunOptions(
        in_flight, workers, resume, overwrite, progress, fsync_interval_s, make_env
    )
    if not isinstance(policy, Policy | AsyncPolicy):
        raise TypeError(f"{policy!r} is not a Policy or AsyncPolicy (see policies/base.py)")
    return resolve_executor(executor).run(config, policy, out, options)
