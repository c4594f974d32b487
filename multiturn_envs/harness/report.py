"""Reports from record files: the Pass@(K,T) table, a heatmap and K- and T-curves as PNG.

The numbers come from :mod:`multiturn_envs.harness.passk` (the unbiased estimator on the
records' first-success turns) and the intervals from :mod:`multiturn_envs.harness.bootstrap`
(percentile bootstrap over tasks). Given two or more runs, every later run is compared with the
first on their common tasks and common (K, T) grid: the gap surface ``A - B`` (A = the FIRST
file, B = the later one; positive = the first run is better) with a paired bootstrap interval
(one set of resampled tasks for both runs).

matplotlib is an optional extra (``pip install multiturn-envs[plot]``): it is imported only
when plots are written, with the non-interactive Agg backend.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from multiturn_envs.harness.bootstrap import BootstrapCI, PairedBootstrapCI
from multiturn_envs.harness.costs import PriceTable, format_costs, load_price_table, run_tokens
from multiturn_envs.harness.passk import (
    PassSurface,
    pass_surface_from_first_success,
    pass_surface_per_budget,
)
from multiturn_envs.harness.records import RunFile, read_run
from multiturn_envs.output_files import check_output, png_is_ours, write_png

__all__ = ["main_report", "surface_of_run"]


@dataclass
class RunSummaryTable:
    """A run's surface with its interval, ready to print or plot."""

    label: str
    run: RunFile
    surface: PassSurface
    ci: BootstrapCI | None


def surface_of_run(
    run: RunFile,
    ks: Sequence[int] | None = None,
    ts: Sequence[int] | None = None,
    tasks: Sequence[str] | None = None,
) -> PassSurface:
    """The Pass@(K,T) surface of one record file (restricted to ``tasks`` when given).

    Hidden budget: every cell from the first-success turns of the one run at ``max_turns``.
    Announced budget: each ``T`` from the trajectories run with budget ``T``.
    """
    config = run.config
    order = [t for t in config["tasks"] if tasks is None or t in set(tasks)]
    if not run.records:
        raise ValueError(f"{run.path} holds no trajectories yet")
    if config["budget_mode"] == "hidden":
        turns: dict[str, list[int | None]] = defaultdict(list)
        for rec in run.records:
            turns[rec["task_id"]].append(rec["first_success_turn"])
        data = {t: turns[t] for t in order if turns.get(t)}
        if not data:
            raise ValueError(f"{run.path} has no trajectories for the requested tasks")
        return pass_surface_from_first_success(data, int(config["max_turns"]), ks=ks, ts=ts)
    by_budget: dict[int, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for rec in run.records:
        by_budget[int(rec["max_turns"])][rec["task_id"]].append(bool(rec["success"]))
    budgets = sorted(by_budget) if ts is None else sorted(set(ts))
    missing = [t for t in budgets if t not in by_budget]
    if missing:
        raise ValueError(f"{run.path} (announced budgets) has no trajectories for T={missing}")
    complete = [t for t in order if all(by_budget[b].get(t) for b in budgets)]
    if not complete:
        raise ValueError(f"{run.path}: no task has trajectories at every budget yet")
    runs = {b: {t: by_budget[b][t] for t in complete} for b in budgets}
    return pass_surface_per_budget(runs, ks=ks)


def _label(run: RunFile) -> str:
    return f"{run.config['policy']} ({Path(run.path).stem})"


def _cell(value: float, low: float | None = None, high: float | None = None) -> str:
    if np.isnan(value):
        return "-"
    if low is None or high is None or np.isnan(low):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.2f},{high:.2f}]"


def format_table(
    ks: np.ndarray,
    ts: np.ndarray,
    values: np.ndarray,
    low: np.ndarray | None,
    high: np.ndarray | None,
    title: str,
) -> str:
    """Rows K, columns T; each cell the estimate, with ``[low,high]`` when given."""
    rows = [["K \\ T", *[str(t) for t in ts.tolist()]]]
    for i, k in enumerate(ks.tolist()):
        cells = [
            _cell(
                float(values[i, j]),
                None if low is None else float(low[i, j]),
                None if high is None else float(high[i, j]),
            )
            for j in range(ts.size)
        ]
        rows.append([str(k), *cells])
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [title]
    for r in rows:
        lines.append("  ".join(cell.rjust(w) for cell, w in zip(r, widths)))
    return "\n".join(lines)


def summarise(
    run: RunFile,
    ks: Sequence[int] | None,
    ts: Sequence[int] | None,
    n_boot: int,
    alpha: float,
    seed: int,
    tasks: Sequence[str] | None = None,
) -> RunSummaryTable:
    from multiturn_envs.harness.bootstrap import surface_ci

    surface = surface_of_run(run, ks=ks, ts=ts, tasks=tasks)
    ci = surface_ci(surface, n_boot=n_boot, alpha=alpha, seed=seed) if n_boot > 0 else None
    return RunSummaryTable(_label(run), run, surface, ci)


def run_title(table: RunSummaryTable, alpha: float) -> str:
    cfg, s = table.run.config, table.surface
    ns = sorted(set(np.asarray(s.n_per_task).ravel().tolist()))
    n_text = str(ns[0]) if len(ns) == 1 else f"{ns[0]}..{ns[-1]}"
    ci = (
        f", {100 * (1 - alpha):g}% CI over tasks (B={table.ci.n_boot})"
        if table.ci is not None
        else ""
    )
    inj = "" if cfg.get("error_after") is None else f", error after {cfg['error_after']}"
    return (
        f"Pass@(K,T) of {cfg['policy']} on {cfg['env_id']} [{table.run.path}]: "
        f"{s.n_tasks} tasks, n={n_text} per task, {cfg['budget_mode']} budget{inj}{ci}"
    )


def format_run(table: RunSummaryTable, alpha: float) -> str:
    s, ci = table.surface, table.ci
    return format_table(
        s.ks,
        s.ts,
        s.values,
        None if ci is None else ci.low,
        None if ci is None else ci.high,
        run_title(table, alpha),
    )


def compare_runs(
    a: RunFile,
    b: RunFile,
    ks: Sequence[int] | None,
    ts: Sequence[int] | None,
    n_boot: int,
    alpha: float,
    seed: int,
) -> tuple[PassSurface, PassSurface, PairedBootstrapCI | None]:
    """Both surfaces on their common tasks and grid, and the paired interval of ``A - B``."""
    from multiturn_envs.harness.bootstrap import paired_surface_ci

    common = [t for t in a.config["tasks"] if t in set(b.config["tasks"])]
    if not common:
        raise ValueError(f"{a.path} and {b.path} have no task in common")
    done_a = {r["task_id"] for r in a.records}
    done_b = {r["task_id"] for r in b.records}
    common = [t for t in common if t in done_a and t in done_b]
    sa = surface_of_run(a, tasks=common)
    sb = surface_of_run(b, tasks=common)
    common = [t for t in sa.task_ids if t in set(sb.task_ids)]
    if ks is None:
        k_top = int(min(np.min(sa.n_per_task), np.min(sb.n_per_task)))
        ks = list(range(1, k_top + 1))
    if ts is None:
        ts = sorted(set(sa.ts.tolist()) & set(sb.ts.tolist()))
        if not ts:
            raise ValueError(f"{a.path} and {b.path} share no budget T")
    sa = surface_of_run(a, ks=ks, ts=ts, tasks=common)
    sb = surface_of_run(b, ks=ks, ts=ts, tasks=common)
    paired = (
        paired_surface_ci(sa, sb, n_boot=n_boot, alpha=alpha, seed=seed) if n_boot > 0 else None
    )
    return sa, sb, paired


def _select(values: np.ndarray, at_most: int) -> list[int]:
    """Up to ``at_most`` values spread over ``values``, always including the first and last."""
    vals: list[int] = values.tolist()
    if len(vals) <= at_most:
        return vals
    picks = np.unique(np.round(np.linspace(0, len(vals) - 1, at_most)).astype(int))
    return [vals[i] for i in picks]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "plots need matplotlib: pip install 'multiturn-envs[plot]' (or turn plots off)"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _heatmap(
    ax: Any,
    ks: np.ndarray,
    ts: np.ndarray,
    values: np.ndarray,
    title: str,
    diff: bool,
    ylabel: bool = True,
) -> Any:
    lim = 1.0
    if diff:
        lim = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
        lim = lim or 1.0
        im = ax.imshow(values, origin="lower", aspect="auto", cmap="RdBu", vmin=-lim, vmax=lim)
    else:
        im = ax.imshow(values, origin="lower", aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(ts.size), [str(t) for t in ts.tolist()])
    ax.set_yticks(range(ks.size), [str(k) for k in ks.tolist()])
    ax.set_xlabel("T (turn budget)")
    if ylabel:  # panels side by side share K: one label, no overlap with the panel before
        ax.set_ylabel("K (samples)")
    ax.set_title(title, fontsize=9)
    if ks.size * ts.size <= 144:
        for i in range(ks.size):
            for j in range(ts.size):
                v = values[i, j]
                if np.isfinite(v):
                    # dark text where the colour map is light: viridis' top, RdBu's middle
                    light = abs(v) / lim < 0.45 if diff else v > 0.65
                    colour = "black" if light else "white"
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color=colour)
    return im


def write_plots(
    tables: Sequence[RunSummaryTable],
    out_dir: str | os.PathLike[str],
    stem: str,
    diffs: Sequence[tuple[str, PassSurface, PassSurface]] = (),
    overwrite: bool = False,
) -> list[Path]:
    """Write ``<stem>_heatmap.png``, ``<stem>_k_curves.png`` and ``<stem>_t_curves.png``
    under the output rule (:mod:`multiturn_envs.output_files`: a PNG that an earlier report
    wrote is replaced with ``overwrite``; any other file at a path stops the report before it
    writes a plot).

    With several runs, the heatmap figure has one panel per run plus one ``A - B`` panel per
    entry of ``diffs``; the curves overlay the runs (line style per run, colour per T or K) with
    their bootstrap bands.
    """
    plt = _pyplot()
    out = Path(out_dir)
    names = [out / f"{stem}_{kind}.png" for kind in ("heatmap", "k_curves", "t_curves")]
    for png in names:  # all checked before one is written
        check_output(png, overwrite=overwrite, is_ours=png_is_ours)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig: Any, path: Path) -> None:
        write_png(path, fig, overwrite=overwrite)
        written.append(path)

    panels = len(tables) + len(diffs)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), squeeze=False)
    for n, (ax, table) in enumerate(zip(axes[0], tables)):
        s = table.surface
        im = _heatmap(ax, s.ks, s.ts, s.values, table.label, diff=False, ylabel=n == 0)
    fig.colorbar(im, ax=axes[0, : len(tables)].tolist(), label="Pass@(K,T)")
    for ax, (title, sa, sb) in zip(axes[0, len(tables) :], diffs):
        im = _heatmap(ax, sa.ks, sa.ts, sa.values - sb.values, title, diff=True)
        fig.colorbar(im, ax=ax, label="difference")
    save(fig, names[0])

    styles = ["-", "--", ":", "-."]
    cmap = plt.get_cmap("viridis")
    for axis_name in ("k", "t"):
        fig, ax = plt.subplots(figsize=(5.6, 4.0))
        for r, table in enumerate(tables):
            s, ci = table.surface, table.ci
            chosen = _select(s.ts if axis_name == "k" else s.ks, 5)
            for c, v in enumerate(chosen):
                colour = cmap(c / max(len(chosen) - 1, 1) * 0.9)
                if axis_name == "k":
                    j = int(np.flatnonzero(s.ts == v)[0])
                    x, y = s.ks, s.values[:, j]
                    band = None if ci is None else (ci.low[:, j], ci.high[:, j])
                    name = f"T={v}"
                else:
                    i = int(np.flatnonzero(s.ks == v)[0])
                    x, y = s.ts, s.values[i, :]
                    band = None if ci is None else (ci.low[i, :], ci.high[i, :])
                    name = f"K={v}"
                label = name if len(tables) == 1 else f"{table.label} {name}"
                ax.plot(x, y, styles[r % len(styles)], color=colour, marker="o", ms=3, label=label)
                if band is not None:
                    ax.fill_between(x, band[0], band[1], color=colour, alpha=0.12, lw=0)
        ax.set_xlabel("K (samples)" if axis_name == "k" else "T (turn budget)")
        ax.set_ylabel("Pass@(K,T)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title("Pass@K at fixed T" if axis_name == "k" else "Pass@T at fixed K", fontsize=9)
        save(fig, out / f"{stem}_{axis_name}_curves.png")
    return written


def main_report(
    files: Sequence[str],
    *,
    out_dir: str | None = None,
    ks: Sequence[int] | None = None,
    ts: Sequence[int] | None = None,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    plots: bool = True,
    prices: PriceTable | str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> str:
    """What ``multiturn-envs report`` prints (and the PNGs it writes); returns the text.

    Under each run's table: its tokens and, with ``prices`` (a :class:`~.costs.PriceTable` or
    its file), what it cost in all, per episode and per success. ``overwrite``: replace PNGs
    that an earlier report wrote (a file it did not write is never replaced).
    """
    if n_boot < 0:
        raise ValueError(f"n_boot (bootstrap resamples) must be >= 0, got {n_boot}")
    table_of_prices = (
        prices if prices is None or isinstance(prices, PriceTable) else load_price_table(prices)
    )
    runs = [read_run(f) for f in files]
    parts: list[str] = []
    tables: list[RunSummaryTable] = []
    for run in runs:
        table = summarise(run, ks, ts, n_boot, alpha, seed)
        tables.append(table)
        note = f"\n({run.duplicates} duplicate records ignored)" if run.duplicates else ""
        tokens = format_costs(run_tokens(run.config["policy"], run.records), table_of_prices)
        parts.append(format_run(table, alpha) + note + "\n" + tokens)
    diffs: list[tuple[str, PassSurface, PassSurface]] = []
    for other in runs[1:]:
        sa, sb, paired = compare_runs(runs[0], other, ks, ts, n_boot, alpha, seed)
        title = f"{_label(runs[0])} - {_label(other)}"
        diffs.append((title, sa, sb))
        ci_text = f", paired {100 * (1 - alpha):g}% CI over tasks (B={n_boot})" if paired else ""
        parts.append(
            format_table(
                sa.ks,
                sa.ts,
                sa.values - sb.values,
                None if paired is None else paired.diff.low,
                None if paired is None else paired.diff.high,
                f"Difference {title}: {sa.n_tasks} common tasks{ci_text}",
            )
        )
    if plots:
        first = Path(runs[0].path)
        stem = first.stem if len(runs) == 1 else "_vs_".join(Path(r.path).stem for r in runs)
        paths = write_plots(tables, out_dir or first.parent, stem, diffs, overwrite)
        parts.append("Plots: " + ", ".join(str(p) for p in paths))
    return "\n\n".join(parts)
