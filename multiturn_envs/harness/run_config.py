"""What a run computes: :class:`EvalConfig`, the one definition of a run's config.

A run's config is everything that determines its records (env, policy, tasks, samples, budget,
seeds). It is written once, here, as the dataclass :class:`EvalConfig`; the rest is derived:

* the run header's ``config`` on disk is ``EvalConfig.to_dict()``: the fields plus ``schema``;
* :class:`RunConfig` types that dict for readers (mypy needs a ``TypedDict``); a test checks
  that its keys and types are the dataclass fields' plus ``schema``;
* :mod:`.records` builds the checks of a header read from disk from the fields' types.

This module sits below :mod:`.records` (which reads and writes the header) and :mod:`.config`
(how a run executes, its seeds), so both can take the definition from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from multiturn_envs.core import BUDGET_MODES

__all__ = [
    "MAX_TURN_GRID",
    "READABLE_SCHEMAS",
    "SCHEMA_VERSION",
    "EvalConfig",
    "RecordKey",
    "RunConfig",
]

SCHEMA_VERSION = 2
"""The version of the record file schema (the header and every trajectory line carry it).
2 added the tokens of each turn (``prompt_tokens``, ``completion_tokens``), those of a reply
that stopped the episode (``stop_tokens``) and the run's ``token_limit``."""

READABLE_SCHEMAS = (1, 2)
"""The schemas this version reads: a file of schema 1 lacks what 2 added (read as absent)."""

MAX_TURN_GRID = 4096
"""The most budgets an announced-budget run may list (each gets its own episodes)."""

RecordKey = tuple[str, int, int]
"""(task_id, sample index, max_turns): what identifies a trajectory within a run."""


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
        token_limit: ``None``, or the most tokens (prompt and completion, summed over the
            turns) one episode may use: the turn whose reply reaches it is the episode's last,
            truncated with the reason ``token_limit`` (the policy must report its tokens).

    A field's type is also what a header read from disk must hold (as JSON gives it); a
    field's ``metadata["expected"]``, where set, words that in the reader's error message.
    """

    env_id: str
    policy: str
    tasks: list[str] = field(metadata={"expected": "a list of task ids"})
    samples: int
    max_turns: int
    budget_mode: str = "hidden"
    turn_grid: list[int] | None = None
    error_after: int | None = None
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    token_limit: int | None = None

    def __post_init__(self) -> None:
        if self.token_limit is not None and (
            isinstance(self.token_limit, bool)
            or not isinstance(self.token_limit, int)
            or self.token_limit < 1
        ):
            raise ValueError(
                f"token_limit must be a positive int or None, got {self.token_limit!r}"
            )
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
        """The run header's ``config`` (a :class:`RunConfig`): ``schema`` and every field."""
        return {"schema": SCHEMA_VERSION, **asdict(self)}


class RunConfig(TypedDict):
    """The header's ``config`` as read back: :meth:`EvalConfig.to_dict`'s keys and types.

    Derived, not a second definition: ``tests/harness/test_run_config.py`` checks that its
    fields are ``schema`` plus exactly :class:`EvalConfig`'s, with the same types.
    """

    schema: int
    env_id: str
    policy: str
    tasks: list[str]
    samples: int
    max_turns: int
    budget_mode: str
    turn_grid: list[int] | None
    error_after: int | None
    seed: int
    env_kwargs: dict[str, Any]
    token_limit: int | None
