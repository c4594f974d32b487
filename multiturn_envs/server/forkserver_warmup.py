"""Imported last by the fork server: warm the served env's shared caches, then freeze the heap.

Why. Every session's worker is forked from multiprocessing's fork server
(:func:`~.worker.prepare`), so what the fork server holds, each worker starts with, shared
copy-on-write. Without this module it holds the imported modules only, and each fresh worker
refills for itself what the previous design (env steps on threads of the server) filled once
per server: FrozenLake's per-map tasks with their oracle tables (~2-5 ms a map), and whatever
else an env memoises process-wide on reset. On fresh sessions of 8 episodes each, the warm-up
saves a third of a FrozenLake worker's ~31 ms of CPU and a sixth of an InterCode-SQL worker's
~40 ms (docs/ecosystem.md).

What it does, at import (the fork server's only hook: it imports a list of module names).
When the server set :data:`WARM_UP_VAR` (the served env's factory, pickled, base64), it builds
that env, resets it on each task for up to :data:`BUDGET_S` seconds and closes it (resets
only: no action, nothing an agent could have chosen, runs in the fork server); then
``gc.freeze()`` moves every object the fork server holds out of the collector's reach, so a
worker's garbage collections do not write to (and so copy) the pages it shares with the fork
server. :func:`~.worker.first_reset` has already run the same env in the server, with the same
trusted arguments, and found it ``warmable``: no blocking I/O (no sandbox containers or
processes, whose client sockets every worker would inherit) and no thread left behind (a fork
with a thread alive may copy a held lock); the server does not ask for a warm-up otherwise.
Nothing here may raise: the fork server would die and no session could start, so a failing
warm-up only leaves it cold.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import os
import pickle
import time
from collections.abc import Callable
from typing import Any

WARM_UP_VAR = "MTE_FORKSERVER_WARM_UP"
"""The environment variable the server passes the factory in: set (empty when there is no
warm-up) only while it starts the fork server, which removes it, so no worker sees it and
importing this module anywhere else does nothing."""

BUDGET_S = 1.0
"""Seconds after which the warm-up stops (it finishes the task it is on): a server start pays
them once; FrozenLake's 100 maps take ~0.2-0.5 s."""


def encode_factory(make_env: Callable[[], Any] | None) -> str:
    """:data:`WARM_UP_VAR`'s value for ``make_env`` (``None``: no warm-up, a freeze only)."""
    if make_env is None:
        return ""
    return base64.b64encode(pickle.dumps(make_env)).decode("ascii")


def warm_up(make_env: Callable[[], Any], budget_s: float = BUDGET_S) -> int:
    """Reset an env from ``make_env`` on each task until ``budget_s`` seconds have passed
    (the first task at least), then close it; how many tasks it warmed."""
    from multiturn_envs.wrappers.turn_budget import text_env_of

    deadline = time.monotonic() + budget_s
    env = make_env()
    warmed = 0
    try:
        base = text_env_of(env)
        tasks: list[str | None] = [str(task) for task in base.task_ids()] or [None]
        for task in tasks:
            env.reset(seed=warmed, options=None if task is None else {"task_id": task})
            warmed += 1
            if time.monotonic() > deadline:
                break
    finally:
        env.close()
    return warmed


def _run() -> None:
    payload = os.environ.pop(WARM_UP_VAR, None)
    if payload is None:  # not the fork server of a server starting up
        return
    if payload:
        with contextlib.suppress(Exception):  # a cold fork server beats a dead one
            warm_up(pickle.loads(base64.b64decode(payload)))
    gc.collect()
    gc.freeze()


_run()
