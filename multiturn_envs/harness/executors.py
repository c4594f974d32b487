"""Executors: where :func:`~multiturn_envs.harness.rollout.run_eval` runs its episodes.

``run_eval(..., executor=None)`` (or ``"local"``) runs everything in this process with
:class:`LocalExecutor`. ``executor=RayExecutor(...)`` (or ``"ray"``) shards the pending episodes
over Ray actors, on one machine or a cluster: it lives in
:mod:`~multiturn_envs.harness.ray_executor` (its design is described there; docs/scale-out.md
shows how to run it). Any object with the :class:`Executor` method is an executor.
"""

from __future__ import annotations

from typing import Protocol

from multiturn_envs.harness.config import RunOptions, RunSummary
from multiturn_envs.harness.run_config import EvalConfig
from multiturn_envs.harness.runner import run_local
from multiturn_envs.policies.base import AsyncPolicy, Policy

__all__ = ["Executor", "LocalExecutor"]


class Executor(Protocol):
    """Runs the pending episodes of a config and writes their records to ``out`` (a file; ``None``:
    kept in memory, ``RunSummary.records``)."""

    def run(
        self, config: EvalConfig, policy: Policy | AsyncPolicy, out: str | None, options: RunOptions
    ) -> RunSummary: ...


class LocalExecutor:
    """This process (the default): the local runner writing ``out``."""

    def run(
        self, config: EvalConfig, policy: Policy | AsyncPolicy, out: str | None, options: RunOptions
    ) -> RunSummary:
        return run_local(config, policy, options.writer(out, config), options)


def resolve_executor(executor: Executor | str | None) -> Executor:
    """``None``/``"local"``, ``"ray"`` (defaults: ``RAY_ADDRESS`` or a local Ray), or an
    executor object."""
    if executor is None or executor == "local":
        return LocalExecutor()
    if executor == "ray":
        from multiturn_envs.harness.ray_executor import RayExecutor  # Ray code only on demand

        return RayExecutor()
    if isinstance(executor, str):
        raise ValueError(f"executor must be 'local', 'ray' or an executor object, not {executor!r}")
    return executor
