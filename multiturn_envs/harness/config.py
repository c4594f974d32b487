"""How a run executes (:class:`RunOptions`), its episodes' seeds, and what it did.

What a run computes, :class:`~multiturn_envs.harness.run_config.EvalConfig`, lives in
:mod:`.run_config`, below the records that write it as the run header's ``config``.

* **Seeds.** Episode ``(task, sample, T)`` gets a ``SeedSequence(entropy=run seed,
  spawn_key=(hash(task_id), sample, T if announced else 0))``; its first word seeds
  ``env.reset``, the next ``max_turns`` words are the per-turn policy seeds. Seeds therefore
  depend on the task id, never on the task's position, the schedule, the executor or
  ``in_flight``; samples never share a seed; a resumed run reproduces the records of an
  uninterrupted one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from multiturn_envs.harness.records import (
    MemoryWriter,
    RecordWriter,
    TrajectoryRecord,
    make_header,
)
from multiturn_envs.harness.run_config import EvalConfig

__all__ = [
    "EpisodeSeeds",
    "RunOptions",
    "RunSummary",
    "episode_seeds",
]

MAX_IN_FLIGHT = 65_536
"""The most env instances one runner holds (each is a live env: memory, maybe a container)."""
MAX_WORKERS = 1024
"""The most threads one runner steps its envs with."""


@dataclass(frozen=True)
class RunOptions:
    """How a run executes (not what it computes: records do not depend on these).

    Attributes:
        in_flight: env instances, i.e. the largest batch handed to the policy (per worker).
        workers: threads stepping/resetting envs (1: inline; per worker).
        resume: skip the trajectories the file already holds; refuse a file of another run.
        overwrite: start the file afresh.
        progress: show a progress bar (``None``: when stderr is a tty).
        fsync_interval_s: see :class:`~multiturn_envs.harness.records.RecordWriter`.
        make_env: builds one env instance (default ``gym.make(env_id, **env_kwargs)``).
    """

    in_flight: int = 64
    workers: int = 1
    resume: bool = True
    overwrite: bool = False
    progress: bool | None = None
    fsync_interval_s: float = 1.0
    make_env: Callable[[], gym.Env[str, str]] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"in_flight must be in 1..{MAX_IN_FLIGHT}, got {self.in_flight}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers must be in 1..{MAX_WORKERS}, got {self.workers}")

    def writer(self, out: str | None, config: EvalConfig) -> RecordWriter:
        """The record writer of ``config``'s file ``out`` (header stamped now); ``None``: a
        :class:`~multiturn_envs.harness.records.MemoryWriter` (no file)."""
        if out is None:
            return MemoryWriter(make_header(config.to_dict()))
        return RecordWriter(
            out,
            make_header(config.to_dict()),
            resume=self.resume,
            overwrite=self.overwrite,
            fsync_interval_s=self.fsync_interval_s,
        )


def task_hash(task_id: str) -> int:
    """A stable 63-bit hash of a task id (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(task_id.encode("utf-8")).digest()[:8], "big") >> 1


class EpisodeSeeds:
    """The env seed and the per-turn policy seeds of one episode, drawn as turns are played.

    Word 0 of the episode's ``SeedSequence`` seeds ``reset``, word ``1 + t`` the policy at turn
    ``t``. ``generate_state(n)`` is a prefix of ``generate_state(m)`` for ``n <= m``, so growing
    the block (doubling) gives the same seeds as drawing all ``max_turns`` up front, without
    holding a word per turn of a budget that is never reached (``max_turns=10**9``).
    """

    __slots__ = ("_seq", "_words", "env_seed")

    def __init__(self, run_seed: int, task_id: str, sample: int, budget_key: int) -> None:
        self._seq = np.random.SeedSequence(
            entropy=run_seed, spawn_key=(task_hash(task_id), sample, budget_key)
        )
        self._words: list[int] = [int(w) for w in self._seq.generate_state(9, dtype=np.uint64)]
        self.env_seed = self._words[0]

    def policy_seed(self, turn: int) -> int:
        """The policy's seed at ``turn`` (0-based)."""
        if turn + 1 >= len(self._words):
            n = max(2 * len(self._words), turn + 2)
            self._words = [int(w) for w in self._seq.generate_state(n, dtype=np.uint64)]
        return self._words[turn + 1]


def episode_seeds(
    run_seed: int, task_id: str, sample: int, budget_key: int, n_turns: int
) -> tuple[int, list[int]]:
    """The env seed and the first ``n_turns`` per-turn policy seeds of one episode."""
    seeds = EpisodeSeeds(run_seed, task_id, sample, budget_key)
    return seeds.env_seed, [seeds.policy_seed(t) for t in range(n_turns)]


@dataclass
class RunSummary:
    """What a call to :func:`run_eval` did.

    ``records``: the trajectories themselves when the run kept them in memory (``out=None``;
    ``path`` is then ``"<memory>"``), else ``None`` (read them with ``read_run(path)``).
    """

    path: str
    run_id: str
    total: int
    skipped: int
    written: int
    policy_calls: int
    steps: int
    wall_s: float
    repaired_bytes: int = 0
    records: list[TrajectoryRecord] | None = None
