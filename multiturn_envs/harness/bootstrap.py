"""Percentile bootstrap confidence intervals over units (tasks, or states), paired when asked.

The unit of resampling is the task (or, for same-state comparisons, the state): rollouts are
never resampled within a task, because a duplicated rollout enters the same K-subset twice and
biases the pass@k U-statistic upward. One set of resampled indices is drawn per call and shared by
every cell of a surface and by both policies of a comparison, so that

* the intervals of different cells are jointly consistent, and
* the interval of a difference ``A - B`` is computed directly from paired replicates
  (identical policies give exactly ``[0, 0]``).

Per-unit values may be ``NaN`` (a task excluded from a cell because ``K > n``); a replicate's
mean then ignores them, weighted by how often each remaining unit was drawn.

:func:`pooled_bootstrap_ci` adds a second level for figures pooled over several *runs* (training
seeds, or the same seed on machines whose floating-point paths differ): it resamples the runs as
well as the units, so the interval counts how much a run's result moves, not only which tasks
were drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from multiturn_envs.harness.passk import PassSurface, json_ready

__all__ = [
    "DEFAULT_N_BOOT",
    "BootstrapCI",
    "Interval",
    "PairedBootstrapCI",
    "bootstrap_ci",
    "paired_bootstrap_ci",
    "paired_surface_ci",
    "pooled_bootstrap_ci",
    "ratio_interval",
    "surface_ci",
]

DEFAULT_N_BOOT = 2_000
MAX_INDEX_CELLS = 200_000_000
"""The most resample x unit indices one bootstrap draws (800 MB as int32), and the most
replicate values it keeps: beyond, a clear error."""
_CHUNK_CELLS = 4_000_000  # replicate-rows x units per chunk: bounds the weight matrix's memory


@dataclass(frozen=True)
class BootstrapCI:
    """A point estimate with a percentile interval, for every cell of an array.

    Attributes:
        estimate: the mean over units of the original data (``NaN``-ignoring).
        low: the ``alpha / 2`` quantile of the replicate means.
        high: the ``1 - alpha / 2`` quantile of the replicate means.
        alpha: ``1 - `` the coverage (0.05: a 95 % interval).
        n_boot: the number of replicates.
        seed: the seed of the resampled indices.
    """

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    alpha: float
    n_boot: int
    seed: int | None

    def to_dict(self) -> dict[str, Any]:
        def clean(a: np.ndarray) -> Any:
            return json_ready(np.asarray(a, dtype=np.float64))

        return {
            "estimate": clean(self.estimate),
            "low": clean(self.low),
            "high": clean(self.high),
            "alpha": self.alpha,
            "n_boot": self.n_boot,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class PairedBootstrapCI:
    """Intervals of ``A``, ``B`` and ``A - B`` from one shared set of resampled indices."""

    a: BootstrapCI
    b: BootstrapCI
    diff: BootstrapCI

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "diff": self.diff.to_dict()}


def bootstrap_indices(
    n_units: int, n_boot: int = DEFAULT_N_BOOT, seed: int | None = 0
) -> np.ndarray:
    """``(n_boot, n_units)`` unit indices drawn with replacement: the one shared index set."""
    if isinstance(n_units, bool) or not isinstance(n_units, int | np.integer) or n_units < 1:
        raise ValueError(f"the bootstrap needs at least one unit, got n_units={n_units!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if int(n_boot) * int(n_units) > MAX_INDEX_CELLS:
        raise ValueError(
            f"{n_boot} resamples x {n_units} units is over {MAX_INDEX_CELLS:,} drawn indices: "
            "use fewer resamples (2,000 is the default; 10,000 is plenty)"
        )
    rng = np.random.default_rng(seed)
    dtype = np.int32 if n_units < 2**31 else np.int64
    return rng.integers(0, n_units, size=(int(n_boot), int(n_units)), dtype=dtype)


def _replicate_means(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``(n_boot, *cells)`` NaN-ignoring means of ``values`` over each row of ``indices``.

    Works through multiplicity weights (how often each unit was drawn) and a matrix product, in
    chunks of replicates, so memory stays ``O(chunk * n_units + n_boot * cells)`` instead of
    materialising ``values[indices]``.
    """
    n_units = values.shape[0]
    flat = values.reshape(n_units, -1)
    present = ~np.isnan(flat)
    filled = np.where(present, flat, 0.0)
    present_f = present.astype(np.float64)
    n_boot = indices.shape[0]
    if n_boot * flat.shape[1] > MAX_INDEX_CELLS:
        raise ValueError(
            f"{n_boot} resamples x {flat.shape[1]} cells is over {MAX_INDEX_CELLS:,} replicate "
            "values: use fewer resamples (2,000 is the default; 10,000 is plenty)"
        )
    out = np.empty((n_boot, flat.shape[1]))
    chunk = max(1, _CHUNK_CELLS // max(n_units, 1))
    for start in range(0, n_boot, chunk):
        rows = indices[start : start + chunk]
        m = rows.shape[0]
        offsets = (np.arange(m, dtype=np.int64) * n_units)[:, None]
        weights = np.bincount((rows + offsets).ravel(), minlength=m * n_units)
        weights = weights.reshape(m, n_units).astype(np.float64)
        sums = weights @ filled
        counts = weights @ present_f
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + m] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return out.reshape((n_boot, *values.shape[1:]))


def _nanmean_units(values: np.ndarray) -> np.ndarray:
    present = ~np.isnan(values)
    counts = present.sum(axis=0)
    sums = np.where(present, values, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _check_alpha(alpha: float) -> float:
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return float(alpha)


def _as_units(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[0] < 1:
        raise ValueError(f"{name} needs a leading axis of at least one unit, got shape {arr.shape}")
    return arr


def _interval(
    values: np.ndarray, indices: np.ndarray, alpha: float, seed: int | None
) -> BootstrapCI:
    reps = _replicate_means(values, indices)
    with np.errstate(invalid="ignore"):
        # All-NaN columns (a cell no replicate could fill) give NaN bounds without a warning.
        all_nan = np.isnan(reps).all(axis=0)
        safe = np.where(all_nan[None, ...], 0.0, reps)
        low, high = np.nanquantile(safe, [alpha / 2, 1 - alpha / 2], axis=0)
    low = np.where(all_nan, np.nan, low)
    high = np.where(all_nan, np.nan, high)
    return BootstrapCI(
        estimate=_nanmean_units(values),
        low=low,
        high=high,
        alpha=alpha,
        n_boot=indices.shape[0],
        seed=seed,
    )


def bootstrap_ci(
    per_unit: Any,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
    indices: np.ndarray | None = None,
) -> BootstrapCI:
    """Percentile interval of the mean over units, for every trailing cell of ``per_unit``.

    Args:
        per_unit: array ``(n_units, ...)``, e.g. a surface's ``per_task``.
        n_boot: replicates (ignored when ``indices`` is given).
        alpha: ``0.05`` for a 95 % interval.
        seed: seed of the resampled indices; the same seed gives the same interval.
        indices: a shared index set from :func:`bootstrap_indices` (to pair with other calls).
    """
    alpha = _check_alpha(alpha)
    values = _as_units("per_unit", per_unit)
    if indices is None:
        indices = bootstrap_indices(values.shape[0], n_boot, seed)
    elif indices.ndim != 2 or indices.shape[1] != values.shape[0]:
        raise ValueError(f"indices of shape {indices.shape} do not match {values.shape[0]} units")
    return _interval(values, indices, alpha, seed)


def paired_bootstrap_ci(
    per_unit_a: Any,
    per_unit_b: Any,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> PairedBootstrapCI:
    """Intervals of ``A``, ``B`` and of the difference ``A - B``, resampling units jointly.

    ``per_unit_a[i]`` and ``per_unit_b[i]`` must describe the same unit (task or state). The
    difference is the mean over units of ``a_i - b_i``, where only units defined for both count.
    """
    alpha = _check_alpha(alpha)
    a = _as_units("per_unit_a", per_unit_a)
    b = _as_units("per_unit_b", per_unit_b)
    if a.shape != b.shape:
        raise ValueError(f"paired data must have the same shape, got {a.shape} and {b.shape}")
    indices = bootstrap_indices(a.shape[0], n_boot, seed)
    return PairedBootstrapCI(
        a=_interval(a, indices, alpha, seed),
        b=_interval(b, indices, alpha, seed),
        diff=_interval(a - b, indices, alpha, seed),
    )


def surface_ci(
    surface: PassSurface, n_boot: int = DEFAULT_N_BOOT, alpha: float = 0.05, seed: int | None = 0
) -> BootstrapCI:
    """Interval of every Pass@(K,T) cell, one index set over tasks for all cells."""
    return bootstrap_ci(surface.per_task, n_boot=n_boot, alpha=alpha, seed=seed)


def paired_surface_ci(
    surface_a: PassSurface,
    surface_b: PassSurface,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> PairedBootstrapCI:
    """Paired intervals of two policies' surfaces and of ``A - B``, aligned by task id.

    Both surfaces must cover the same tasks on the same (K, T) grid; ``B``'s rows are reordered
    to ``A``'s task order.
    """
    if set(surface_a.task_ids) != set(surface_b.task_ids):
        only_a = sorted(set(surface_a.task_ids) - set(surface_b.task_ids))[:5]
        only_b = sorted(set(surface_b.task_ids) - set(surface_a.task_ids))[:5]
        raise ValueError(
            f"a paired comparison needs the same tasks: only in A {only_a}, only in B {only_b}"
        )
    if not (
        np.array_equal(surface_a.ks, surface_b.ks) and np.array_equal(surface_a.ts, surface_b.ts)
    ):
        raise ValueError(
            f"surfaces are on different grids: K {surface_a.ks.tolist()} vs "
            f"{surface_b.ks.tolist()}, T {surface_a.ts.tolist()} vs {surface_b.ts.tolist()}"
        )
    order = {task: i for i, task in enumerate(surface_b.task_ids)}
    b_rows = surface_b.per_task[[order[task] for task in surface_a.task_ids]]
    return paired_bootstrap_ci(surface_a.per_task, b_rows, n_boot=n_boot, alpha=alpha, seed=seed)


def pooled_bootstrap_ci(
    per_run: Any,
    *,
    crossed: bool,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> BootstrapCI:
    """Interval of a mean over runs of each run's mean over its units, resampling both levels.

    Why two levels: a training run is one draw of a chaotic process (its seed, and on another
    machine the floating-point path of every kernel, move it), so a conclusion pooled over runs
    must carry the variation between runs as well as the variation between tasks. Each
    replicate draws the runs with replacement, then the units:

    * ``crossed=True``: every run has the same units in the same order (the held-out maps of a
      study, each evaluated under every seed); one unit draw per replicate is shared by all the
      drawn runs (the two-way "pigeonhole" bootstrap, Owen 2007, which counts the run, the unit
      and their interaction, and errs on the wide side);
    * ``crossed=False``: each run has its own units (the states a run's base visited); every
      drawn run gets its own unit draw (the two-stage bootstrap).

    The estimate is the mean over runs of each run's mean over its units (runs weigh equally).
    With one run this is the ordinary bootstrap over units. A paired comparison passes the
    per-unit differences (``a - b`` of one run). Few runs make the run level coarse (four runs
    have 35 distinct resamples): read the interval with that in mind.

    Args:
        per_run: one array ``(n_units, ...)`` per run, finite values; the same shape for every
            run when ``crossed``, the same trailing cells otherwise.
        crossed: whether the runs share their units (see above).
        n_boot: replicates.
        alpha: ``0.05`` for a 95 % interval.
        seed: seed of the resampled runs and units.
    """
    alpha = _check_alpha(alpha)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    runs = [_as_units(f"per_run[{i}]", values) for i, values in enumerate(per_run)]
    if not runs:
        raise ValueError("a pooled interval needs at least one run")
    cells = runs[0].shape[1:]
    for i, values in enumerate(runs):
        if values.shape[1:] != cells or (crossed and values.shape != runs[0].shape):
            want = runs[0].shape if crossed else ("n", *cells)
            raise ValueError(
                f"per_run[{i}] has shape {values.shape}, per_run[0] {runs[0].shape}: "
                f"{'crossed runs share their units' if crossed else 'runs share their cells'} "
                f"(want {want})"
            )
        if not np.isfinite(values).all():
            raise ValueError(f"per_run[{i}] holds a non-finite value: pooled units must be finite")
    n_runs, n_boot = len(runs), int(n_boot)
    drawn = n_boot * n_runs * (runs[0].shape[0] if crossed else sum(v.shape[0] for v in runs))
    if drawn > MAX_INDEX_CELLS:
        raise ValueError(
            f"{n_boot} resamples of {n_runs} runs and their units is over {MAX_INDEX_CELLS:,} "
            "drawn indices: use fewer resamples"
        )
    n_cells = int(np.prod(cells, dtype=np.int64))
    kept = n_boot * n_cells * (1 if crossed else n_runs * n_runs)  # the slot means, when nested
    if kept > MAX_INDEX_CELLS:
        raise ValueError(
            f"{n_boot} resamples of {n_runs} runs x {n_cells} cells is over {MAX_INDEX_CELLS:,} "
            "replicate values kept: use fewer resamples or fewer cells"
        )
    rng = np.random.default_rng(seed)
    run_idx = rng.integers(0, n_runs, size=(n_boot, n_runs))
    run_weights = np.zeros((n_boot, n_runs))
    np.add.at(run_weights, (np.arange(n_boot)[:, None], run_idx), 1.0 / n_runs)
    flat = [v.reshape(v.shape[0], -1) for v in runs]
    if crossed:
        stacked = np.stack(flat)  # (runs, units, cells)
        unit_idx = rng.integers(0, stacked.shape[1], size=(n_boot, stacked.shape[1]))
        unit_weights = np.zeros((n_boot, stacked.shape[1]))
        np.add.at(unit_weights, (np.arange(n_boot)[:, None], unit_idx), 1.0 / stacked.shape[1])
        reps = np.einsum("br,ruc,bu->bc", run_weights, stacked, unit_weights, optimize=True)
    else:
        # each run's unit-resampled means, one per (replicate, slot); a slot drawing run r reads
        # run r's mean for that slot, so a run drawn twice gets two independent unit draws
        slot_means = np.empty((n_runs, n_boot, n_runs, flat[0].shape[1]))
        for r, values in enumerate(flat):
            idx = rng.integers(0, values.shape[0], size=(n_boot * n_runs, values.shape[0]))
            slot_means[r] = _replicate_means(values, idx).reshape(n_boot, n_runs, -1)
        picked = slot_means[run_idx, np.arange(n_boot)[:, None], np.arange(n_runs)[None, :]]
        reps = picked.mean(axis=1)
    low, high = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    estimate = np.mean([v.mean(axis=0) for v in flat], axis=0)
    return BootstrapCI(
        estimate=estimate.reshape(cells),
        low=low.reshape(cells),
        high=high.reshape(cells),
        alpha=alpha,
        n_boot=n_boot,
        seed=seed,
    )


# ------------------------------------------------------------------------- scalar intervals
@dataclass(frozen=True)
class Interval:
    """A point estimate with a percentile bootstrap interval (``NaN`` when undefined)."""

    estimate: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float | None]:
        return {k: (None if math.isnan(v) else v) for k, v in self.__dict__.items()}

    def format(self, percent: bool = True) -> str:
        if math.isnan(self.estimate):
            return "n/a"
        scale, spec, unit = (100.0, ".1f", "%") if percent else (1.0, ".3f", "")
        point = f"{scale * self.estimate:{spec}}{unit}"
        if math.isnan(self.low) or math.isnan(self.high):  # e.g. a group with one task
            return f"{point} [no interval]"
        return f"{point} [{scale * self.low:{spec}}, {scale * self.high:{spec}}]"


def intervals(
    columns: Mapping[str, np.ndarray], n_boot: int, alpha: float, seed: int | None
) -> dict[str, Interval]:
    """One interval per column, all from ONE index set over the units (rows)."""
    names = list(columns)
    matrix = np.stack([np.asarray(columns[n], dtype=np.float64) for n in names], axis=1)
    indices = bootstrap_indices(matrix.shape[0], n_boot, seed)
    ci = bootstrap_ci(matrix, alpha=alpha, seed=seed, indices=indices)
    return {
        name: Interval(float(ci.estimate[i]), float(ci.low[i]), float(ci.high[i]))
        for i, name in enumerate(names)
    }


def ratio_interval(
    numerators: np.ndarray,
    denominators: np.ndarray,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> Interval:
    """``sum(num) / sum(den)`` with a percentile interval from resampling units (tasks).

    A pooled mean (all tokens, actions or trajectories weigh the same) whose uncertainty comes
    from the tasks they belong to. Replicates whose resampled denominator is 0 are dropped.
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError("numerators and denominators are one value per unit each")
    total = float(den.sum())
    if num.size == 0 or total <= 0:
        return Interval(math.nan, math.nan, math.nan)
    estimate = float(num.sum()) / total
    if n_boot <= 0 or num.size < 2:
        return Interval(estimate, math.nan, math.nan)
    idx = bootstrap_indices(num.size, n_boot, seed)
    nums, dens = num[idx].sum(axis=1), den[idx].sum(axis=1)
    keep = dens > 0
    reps = nums[keep] / dens[keep]
    low, high = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return Interval(estimate, float(low), float(high))
