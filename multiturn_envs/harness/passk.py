"""Unbiased pass@k and the Pass@(K,T) surface.

Pass@(K,T) is the probability that at least one of ``K`` independent episodes, each allowed at
most ``T`` turns, succeeds. Per task it is estimated with the unbiased estimator of Chen et al.
(2021) on ``n`` rollouts; the benchmark value is the mean of the per-task estimates (``n`` may
differ between tasks).

Two ways to get the counts:

* **hidden budget** (:func:`pass_surface_from_first_success`): run ``n`` rollouts per task once
  at ``T_max`` with a budget the policy cannot see and success that ends the episode; then the
  first ``T`` turns of a ``T_max`` rollout are distributed like a budget-``T`` rollout, and
  ``c_T = #{rollouts whose first success turn <= T}`` feeds every cell at once;
* **announced budget** (:func:`pass_surface_per_budget`): the policy sees its budget, so its
  behaviour depends on ``T`` and every ``T`` needs rollouts of its own.

``K`` larger than a task's ``n`` has no unbiased estimate for that task. By default this is an
error (``small_n="error"``); ``small_n="exclude"`` drops such tasks from the cells with that
``K`` (their per-task entries are ``NaN`` and the cell is the mean over the remaining tasks).

See ``docs/metrics.md`` for the definitions and the conditions under which the hidden-budget
trick is valid.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "PassSurface",
    "pass_at_k",
    "pass_at_k_table",
    "pass_surface_from_first_success",
    "pass_surface_per_budget",
]

SmallN = Literal["error", "exclude"]
SMALL_N_POLICIES: tuple[str, ...] = ("error", "exclude")


def _exact_int(name: str, value: Any) -> int:
    """``value`` as an int, rejecting bools, floats and strings (a count is never ``2.0``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


MAX_DEFAULT_T = 512
"""Budgets above this get the exact breakpoints as their default T grid, not ``1..t_max``."""
MAX_DEFAULT_K = 512
"""With more rollouts per task than this, the default K grid is ``1..512`` and ``n``."""
_TABLE_CELLS = 4_000_000  # past this many pass@k table cells, compute only the rows needed


def json_ready(array: np.ndarray) -> Any:
    """``array.tolist()`` with every float ``NaN`` as ``None`` (JSON has no NaN)."""

    def clean(value: Any) -> Any:
        if isinstance(value, list):
            return [clean(v) for v in value]
        return None if isinstance(value, float) and math.isnan(value) else value

    return clean(np.asarray(array).tolist())


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task: ``1 - C(n-c, k) / C(n, k)``.

    Computed in the product form ``1 - prod_{j<k} (n-c-j)/(n-j)`` (every factor in [0, 1], so no
    overflow and no catastrophic cancellation for large ``n``).

    Args:
        n: rollouts of the task (``>= 1``).
        c: successful rollouts (``0 <= c <= n``).
        k: sampling width (``1 <= k <= n``).

    Raises:
        TypeError: a count that is not an int.
        ValueError: counts out of range, naming which one.
    """
    n = _exact_int("n", n)
    c = _exact_int("c", c)
    k = _exact_int("k", k)
    if n < 1:
        raise ValueError(f"n (rollouts) must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c (successes) must satisfy 0 <= c <= n = {n}, got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n = {n}, got {k} (no unbiased estimate)")
    if n - c < k:
        return 1.0
    miss = 1.0
    for j in range(k):
        miss *= (n - c - j) / (n - j)
    return 1.0 - miss


def pass_at_k_table(n: int, k_max: int | None = None) -> np.ndarray:
    """All pass@k values for one ``n``: ``table[c, k - 1] = pass_at_k(n, c, k)``.

    Shape ``(n + 1, k_max)``; one cumulative product per ``c``, ``O(n * k_max)`` work. This is what
    makes the surface vectorised: per-task estimates are lookups ``table[c_T, K - 1]``.
    """
    n = _exact_int("n", n)
    if n < 1:
        raise ValueError(f"n (rollouts) must be >= 1, got {n}")
    k_max = n if k_max is None else _exact_int("k_max", k_max)
    if not 1 <= k_max <= n:
        raise ValueError(f"k_max must satisfy 1 <= k_max <= n = {n}, got {k_max}")
    c = np.arange(n + 1, dtype=np.float64)[:, None]
    j = np.arange(k_max, dtype=np.float64)[None, :]
    factors = np.clip(n - c - j, 0.0, None) / (n - j)  # a zero factor once j reaches n - c
    return 1.0 - np.cumprod(factors, axis=1)


@dataclass(frozen=True)
class PassSurface:
    """The Pass@(K,T) surface and what a bootstrap over tasks needs.

    Attributes:
        ks: the sampling widths, ascending (rows of ``values``).
        ts: the turn budgets, ascending (columns of ``values``).
        values: ``(len(ks), len(ts))`` mean over tasks of the per-task estimates.
        per_task: ``(n_tasks, len(ks), len(ts))`` per-task estimates; ``NaN`` where a task was
            excluded because ``K > n`` (``small_n="exclude"``).
        n_per_task: ``(n_tasks, len(ts))`` rollouts behind each task and budget (the columns are
            identical in the hidden-budget form).
        task_ids: the task of each ``per_task`` row.
        budget_mode: ``"hidden"`` (one run at ``T_max``) or ``"announced"`` (runs per ``T``).
    """

    ks: np.ndarray
    ts: np.ndarray
    values: np.ndarray
    per_task: np.ndarray
    n_per_task: np.ndarray
    task_ids: tuple[str, ...]
    budget_mode: str

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    def value(self, k: int, t: int) -> float:
        """The cell ``Pass@(k, t)``; ``KeyError`` when ``k`` or ``t`` is not on the grid."""
        return float(self.values[self._row(k), self._col(t)])

    def tasks_in_cell(self, k: int, t: int) -> int:
        """How many tasks the cell averages (fewer than ``n_tasks`` only with exclusion)."""
        return int(np.sum(~np.isnan(self.per_task[:, self._row(k), self._col(t)])))

    def _row(self, k: int) -> int:
        hits = np.flatnonzero(self.ks == k)
        if hits.size == 0:
            raise KeyError(f"K={k} is not on the grid {self.ks.tolist()}")
        return int(hits[0])

    def _col(self, t: int) -> int:
        hits = np.flatnonzero(self.ts == t)
        if hits.size == 0:
            raise KeyError(f"T={t} is not on the grid {self.ts.tolist()}")
        return int(hits[0])

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready lists (``NaN`` becomes ``None``)."""

        return {
            "budget_mode": self.budget_mode,
            "ks": self.ks.tolist(),
            "ts": self.ts.tolist(),
            "values": json_ready(self.values),
            "task_ids": list(self.task_ids),
            "n_per_task": self.n_per_task.tolist(),
            "per_task": json_ready(self.per_task),
        }


def _grid(name: str, values: Iterable[int] | None, default_max: int, hard_max: int) -> np.ndarray:
    """A sorted, de-duplicated grid of positive ints, validated against ``hard_max``.

    The default is ``1..default_max``, or ``1..MAX_DEFAULT_K`` and ``default_max`` when that
    would be longer (a K column per rollout of 10**6 samples is neither readable nor cheap).
    """
    if values is None:
        top = min(default_max, MAX_DEFAULT_K)
        grid = [*range(1, top + 1), *([default_max] if default_max > top else [])]
    else:
        grid = sorted({_exact_int(name, v) for v in values})
    if not grid:
        raise ValueError(f"the {name} grid is empty")
    if grid[0] < 1:
        raise ValueError(f"{name} values must be >= 1, got {grid[0]}")
    if grid[-1] > hard_max:
        raise ValueError(f"{name}={grid[-1]} exceeds the maximum {hard_max}")
    return np.asarray(grid, dtype=np.int64)


def _check_small_n(small_n: str) -> None:
    if small_n not in SMALL_N_POLICIES:
        raise ValueError(f"small_n must be one of {SMALL_N_POLICIES}, got {small_n!r}")


def _per_task_cells(
    n: int,
    counts: np.ndarray,
    ks: np.ndarray,
    small_n: str,
    task_id: str,
    tables: dict[int, np.ndarray],
) -> np.ndarray:
    """``(len(ks), len(counts))`` estimates for one task; ``NaN`` rows where ``K > n``.

    ``tables`` caches :func:`pass_at_k_table` per ``n`` for the duration of one surface.
    """
    out = np.full((ks.size, counts.size), np.nan)
    usable = ks <= n
    if not usable.all() and small_n == "error":
        raise ValueError(
            f"task {task_id!r} has n={n} rollouts but K={int(ks[~usable][0])} was asked: "
            "pass@K needs K <= n; lower K, add rollouts, or pass small_n='exclude'"
        )
    if usable.any():
        k_top = int(ks[usable].max())
        if (n + 1) * k_top > _TABLE_CELLS:  # huge n: only the rows of the counts seen
            seen, where = np.unique(counts, return_inverse=True)
            rows = _pass_at_k_rows(n, seen, k_top)
            out[usable, :] = rows[where[None, :], ks[usable][:, None] - 1]
            return out
        table = tables.get(n)
        if table is None or table.shape[1] < k_top:
            table = tables[n] = pass_at_k_table(n, k_top)
        out[usable, :] = table[counts[None, :], ks[usable][:, None] - 1]
    return out


def _pass_at_k_rows(n: int, cs: np.ndarray, k_max: int) -> np.ndarray:
    """``pass_at_k_table(n, k_max)[cs]`` without the other ``n + 1 - len(cs)`` rows."""
    c = np.asarray(cs, dtype=np.float64)[:, None]
    j = np.arange(k_max, dtype=np.float64)[None, :]
    return 1.0 - np.cumprod(np.clip(n - c - j, 0.0, None) / (n - j), axis=1)


def _mean_over_tasks(per_task: np.ndarray) -> np.ndarray:
    """Mean over the task axis ignoring ``NaN``; a cell with no task at all is ``NaN``."""
    present = ~np.isnan(per_task)
    counts = present.sum(axis=0)
    sums = np.where(present, per_task, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _task_items(data: Mapping[str, Any] | Sequence[Any]) -> list[tuple[str, Any]]:
    if isinstance(data, Mapping):
        return [(str(task), value) for task, value in data.items()]
    return [(str(i), value) for i, value in enumerate(data)]


def _success_turns(task_id: str, turns: Sequence[int | None], t_max: int) -> np.ndarray:
    """First-success turns as an int array, ``t_max + 1`` standing for "never"."""
    out = np.empty(len(turns), dtype=np.int64)
    for i, turn in enumerate(turns):
        if turn is None:
            out[i] = t_max + 1
            continue
        turn = _exact_int(f"success turn of task {task_id!r}", turn)
        if not 1 <= turn <= t_max:
            raise ValueError(
                f"task {task_id!r}: success turn {turn} is outside 1..t_max={t_max} "
                "(turns are 1-based; use None for no success)"
            )
        out[i] = turn
    return out


def pass_surface_from_first_success(
    success_turns: Mapping[str, Sequence[int | None]] | Sequence[Sequence[int | None]],
    t_max: int,
    ks: Iterable[int] | None = None,
    ts: Iterable[int] | None = None,
    small_n: SmallN = "error",
) -> PassSurface:
    """Every Pass@(K,T) cell from ONE hidden-budget run at ``t_max``.

    Args:
        success_turns: per task, the 1-based first-success turn of each of its rollouts, or
            ``None`` for a rollout that never succeeded (a mapping task id -> list, or a list of
            lists whose ids become ``"0"``, ``"1"``, ...).
        t_max: the budget the rollouts ran with; success turns must lie in ``1..t_max``.
        ks: the sampling widths (default ``1..min n``; past :data:`MAX_DEFAULT_K` rollouts,
            ``1..MAX_DEFAULT_K`` and ``min n``).
        ts: the budgets (default ``1..t_max``; past :data:`MAX_DEFAULT_T` budgets, the exact
            breakpoints instead: ``1..MAX_DEFAULT_T``, every observed success turn and
            ``t_max``, since the surface changes only at success turns); each ``<= t_max``.
        small_n: what to do with a task whose ``n < K``: ``"error"`` (default) or ``"exclude"``.

    Valid only under the truncation-consistency conditions of ``docs/metrics.md`` (hidden
    budget, no end-game change, success that ends the episode, independent rollouts).
    """
    _check_small_n(small_n)
    t_max = _exact_int("t_max", t_max)
    if t_max < 1:
        raise ValueError(f"t_max must be >= 1, got {t_max}")
    items = _task_items(success_turns)
    if not items:
        raise ValueError("no tasks: success_turns is empty")
    turns_per_task = [(task, _success_turns(task, turns, t_max)) for task, turns in items]
    ns = np.array([turns.size for _, turns in turns_per_task], dtype=np.int64)
    if ns.min() < 1:
        empty = next(task for task, turns in turns_per_task if turns.size == 0)
        raise ValueError(f"task {empty!r} has no rollouts")
    k_grid = _grid("K", ks, int(ns.min()), int(ns.max()))
    if ts is None and t_max > MAX_DEFAULT_T:  # a column per turn of a huge budget: no
        seen = {int(t) for _, turns in turns_per_task for t in turns.tolist() if t <= t_max}
        ts = sorted({*range(1, MAX_DEFAULT_T + 1), *seen, t_max})
    t_grid = _grid("T", ts, t_max, t_max)
    per_task = np.empty((len(items), k_grid.size, t_grid.size))
    tables: dict[int, np.ndarray] = {}
    for row, (task, turns) in enumerate(turns_per_task):
        counts = (turns[:, None] <= t_grid[None, :]).sum(axis=0)
        per_task[row] = _per_task_cells(turns.size, counts, k_grid, small_n, task, tables)
    return PassSurface(
        ks=k_grid,
        ts=t_grid,
        values=_mean_over_tasks(per_task),
        per_task=per_task,
        n_per_task=np.repeat(ns[:, None], t_grid.size, axis=1),
        task_ids=tuple(task for task, _ in items),
        budget_mode="hidden",
    )


def pass_surface_per_budget(
    runs: Mapping[int, Mapping[str, Sequence[bool]]],
    ks: Iterable[int] | None = None,
    small_n: SmallN = "error",
) -> PassSurface:
    """Pass@(K,T) from separate runs per budget (announced budgets).

    Args:
        runs: ``{T: {task_id: [success of each rollout run with budget T]}}``. Every ``T`` must
            cover the same tasks (the bootstrap pairs cells by task); ``n`` may differ between
            tasks and between budgets.
        ks: the sampling widths (default ``1..`` the smallest ``n`` of any task and budget).
        small_n: as in :func:`pass_surface_from_first_success`.

    Each cell is unbiased, but the surface need not be monotone in ``T``: a policy that sees its
    budget may do better with less.
    """
    _check_small_n(small_n)
    if not runs:
        raise ValueError("no budgets: runs is empty")
    t_grid = np.asarray(sorted(_exact_int("T", t) for t in runs), dtype=np.int64)
    if t_grid[0] < 1:
        raise ValueError(f"budgets must be >= 1, got {int(t_grid[0])}")
    by_t = {int(t): runs[t] for t in runs}
    task_ids = tuple(str(task) for task in by_t[int(t_grid[0])])
    if not task_ids:
        raise ValueError(f"budget T={int(t_grid[0])} has no tasks")
    for t in t_grid.tolist():
        here = {str(task) for task in by_t[t]}
        if here != set(task_ids):
            missing = sorted(set(task_ids) - here)[:5]
            extra = sorted(here - set(task_ids))[:5]
            raise ValueError(
                f"budget T={t} covers different tasks than T={int(t_grid[0])} "
                f"(missing {missing}, extra {extra}); every budget needs the same tasks"
            )
    successes = np.empty((len(task_ids), t_grid.size), dtype=np.int64)
    ns = np.empty_like(successes)
    for col, t in enumerate(t_grid.tolist()):
        table = {str(task): flags for task, flags in by_t[t].items()}
        for row, task in enumerate(task_ids):
            flags = list(table[task])
            if not flags:
                raise ValueError(f"task {task!r} has no rollouts at budget T={t}")
            for flag in flags:
                if not isinstance(flag, bool | np.bool_):
                    raise TypeError(f"task {task!r}, T={t}: successes must be bools, got {flag!r}")
            ns[row, col] = len(flags)
            successes[row, col] = int(sum(bool(f) for f in flags))
    k_grid = _grid("K", ks, int(ns.min()), int(ns.max()))
    per_task = np.empty((len(task_ids), k_grid.size, t_grid.size))
    tables: dict[int, np.ndarray] = {}
    for row, task in enumerate(task_ids):
        for col in range(t_grid.size):
            per_task[row, :, col] = _per_task_cells(
                int(ns[row, col]),
                successes[row, col : col + 1],
                k_grid,
                small_n,
                f"{task} (T={t_grid[col]})",
                tables,
            )[:, 0]
    return PassSurface(
        ks=k_grid,
        ts=t_grid,
        values=_mean_over_tasks(per_task),
        per_task=per_task,
        n_per_task=ns,
        task_ids=task_ids,
        budget_mode="announced",
    )
