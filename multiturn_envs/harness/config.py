"""What a run is: :class:`EvalConfig` (the run header's ``config``), its episodes and seeds.

* **Seeds.** Episode ``(task, sample, T)`` gets a ``SeedSequence(entropy=run seed,
  spawn_key=(hash(task_id), sample, T if announced else 0))``; its first word seeds
  ``env.reset``, the next ``max_turns`` words are the per-turn policy seeds. Seeds therefore
  depend on the task id, never on the task's position, the schedule, the executor or
  ``in_flight``; samples never share a seed; a resumed run reproduces the records of an
  uninterrupted one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.core import BUDGET_MODES
from multiturn_envs.harness.records import (
    SCHEMA_VERSION,
    MemoryWriter,
    RecordKey,
    RecordWriter,
    TrajectoryRecord,
    make_header,
)

__all__ = [
    "MAX_TURN_GRID",
    "EpisodeSeeds",
    "EvalConfig",
    "RunOptions",
    "RunSummary",
    "episode_seeds",
]

MAX_TURN_GRID = 4096
"""The most budgets an announced-budget run may list (each gets its own episodes)."""
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


@dataclass
class EvalConfig:
    """Everything that determines the records of a run (it is the run header's ``config``).

    Attributes:
        env_id: a registered Gymnasium id, e.g. ``"MT/FrozenLake-v0"``.
        policy: the policy's name or spec (what the records call it).
        tasks: the task ids to run (``env.task_ids()`` gives the choices).
        samples: K, trajectories per task (and per T in announced mode).
        max_turns: T_max, the turn budget.
        budget_mode: ``"hidden"`` or ``"announced"``.
        turn_grid: announced mode only: the budgets to run (default ``1..max_turns``).
        error_after: ``None``, or ``k`` for ``ErrorInjection(after_expert_steps=k)``.
        seed: the run seed (a non-negative int).
        env_kwargs: extra ``gym.make`` keyword arguments (JSON-able).
    """

    env_id: str
    policy: str
    tasks: list[str]
    samples: int
    max_turns: int
    budget_mode: str = "hidden"
    turn_grid: list[int] | None = None
    error_after: int | None = None
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.budget_mode not in BUDGET_MODES:
            raise ValueError(f"budget_mode must be one of {BUDGET_MODES}, got {self.budget_mode!r}")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {self.max_turns!r}")
        if not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"samples must be a positive int, got {self.samples!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if self.error_after is not None and self.error_after < 0:
            raise ValueError(f"error_after must be >= 0, got {self.error_after!r}")
        if not self.tasks:
            raise ValueError("a run needs at least one task")
        self.tasks = [str(t) for t in self.tasks]
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError("task ids must be distinct")
        if self.budget_mode == "hidden":
            if self.turn_grid is not None:
                raise ValueError("turn_grid is for announced budgets; hidden mode runs max_turns")
        else:
            if self.turn_grid is None and self.max_turns > MAX_TURN_GRID:
                raise ValueError(
                    f"announced mode runs every budget of turn_grid (default 1..max_turns): give "
                    f"a turn_grid of at most {MAX_TURN_GRID} budgets for max_turns={self.max_turns}"
                )
            grid = self.turn_grid or list(range(1, self.max_turns + 1))
            if len(grid) > MAX_TURN_GRID:
                raise ValueError(f"turn_grid lists {len(grid)} budgets; at most {MAX_TURN_GRID}")
            grid = sorted({int(t) for t in grid})
            if grid[0] < 1 or grid[-1] > self.max_turns:
                raise ValueError(f"turn_grid must lie in 1..{self.max_turns}, got {grid}")
            self.turn_grid = grid

    def budgets(self) -> list[int]:
        """The budgets episodes run under: ``[max_turns]`` (hidden) or the turn grid."""
        return [self.max_turns] if self.budget_mode == "hidden" else list(self.turn_grid or [])

    def total(self) -> int:
        return len(self.budgets()) * len(self.tasks) * self.samples

    def episode_keys(self) -> Iterator[RecordKey]:
        """Every episode of the run, budget-major, then task, then sample."""
        for budget in self.budgets():
            for task in self.tasks:
                for sample in range(self.samples):
                    yield (task, sample, budget)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, **asdict(self)}


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
