"""The study over seeds: what ``study.py`` wrote for each seed, side by side, with the spread.

    python examples/study/spread.py runs/study 0 1 2 3 4 5 6 7

Reads ``<out>/seed-<s>/summary.json`` (a full run) or, where there is none,
``<out>/seed-<s>/base_summary.json`` (``--base-only``), and prints markdown: the base (does it
read the map: held-out p(expert move), greedy and sampled; its held-out Pass@(1,T_max)), the
headline (Pass@(1,T_max) best arm - base with its paired 95% CI, and every arm's own gap), and
the "paper vs miniature" table with each figure's median and range over the seeds and its value
on every seed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from study import _figure, paper_rows


def _ci(d: dict[str, Any]) -> str:
    return f"{d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def base_table(bases: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| seed | held-out p(expert move) greedy | sampled | training greedy | sampled "
        "| held-out Pass@(1,T_max) [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for seed, b in bases.items():
        held, train = b["agreement"]["held_out"], b["agreement"]["training"]
        p1 = b["pass1_tmax"]
        lines.append(
            f"| {seed} | {held['greedy']:.3f} | {held['sampled']:.3f} | {train['greedy']:.3f} "
            f"| {train['sampled']:.3f} | {p1['estimate']:.3f} [{p1['low']:.3f}, {p1['high']:.3f}] |"
        )
    if len(bases) > 1:
        for key, name in (("held_out", "held-out"), ("training", "training")):
            for what in ("greedy", "sampled"):
                vals = [b["agreement"][key][what] for b in bases.values()]
                lines.append(
                    f"\n{name} {what}: median {np.median(vals):.3f}, range "
                    f"{min(vals):.3f}-{max(vals):.3f}"
                )
        vals = [b["pass1_tmax"]["estimate"] for b in bases.values()]
        lines.append(
            f"\nheld-out Pass@(1,T_max): median {np.median(vals):.3f}, range "
            f"{min(vals):.3f}-{max(vals):.3f}"
        )
    return lines


def headline_table(runs: dict[str, dict[str, Any]]) -> list[str]:
    arms = list(next(iter(runs.values()))["headline_pass1_tmax"])
    lines = [
        "| seed | base | best arm | best - base [95% CI] | "
        + " | ".join(f"{a} - base" for a in arms)
        + " |",
        "|---|---|---|---|" + "---|" * len(arms),
    ]
    for seed, s in runs.items():
        best = s["best_arm"]
        h = s["headline_pass1_tmax"]
        d = h[best]["diff"]
        mark = "**" if d["low"] > 0 else ""
        base, arm = h[best]["base"]["estimate"], h[best]["arm"]["estimate"]
        lines.append(
            f"| {seed} | {base:.3f} | {best} {arm:.3f} | {mark}{_ci(d)}{mark} | "
            + " | ".join(_ci(h[a]["diff"]) for a in arms)
            + " |"
        )
    held = sum(s["headline_pass1_tmax"][s["best_arm"]]["diff"]["low"] > 0 for s in runs.values())
    lines.append(f"\nThe best arm's CI excludes 0 above the base on {held} of {len(runs)} seeds.")
    return lines


def paper_spread(runs: dict[str, dict[str, Any]]) -> list[str]:
    """Each paper row: per figure, the median [min, max] over seeds, then the seeds' values."""
    per_seed = {seed: paper_rows(s) for seed, s in runs.items()}
    first = next(iter(per_seed.values()))
    lines = [
        "| finding | paper (FrozenLake, Qwen3-4B, unless noted) | miniature: median [min, max] "
        f"over {len(runs)} seeds | per seed ({', '.join(runs)}) |",
        "|---|---|---|---|",
    ]
    for i, (finding, paper, figures) in enumerate(first):
        spread, seeds = [], []
        for j, (label, _, kind) in enumerate(figures):
            values = [float(rows[i][2][j][1]) for rows in per_seed.values()]
            labels = {rows[i][2][j][0] for rows in per_seed.values()}
            name = label if len(labels) == 1 else f"({j + 1})"
            finite = [v for v in values if np.isfinite(v)]
            mid = _figure(float(np.median(finite)), kind) if finite else "n/a"
            lo = _figure(min(finite), kind) if finite else "n/a"
            hi = _figure(max(finite), kind) if finite else "n/a"
            spread.append(f"{name} {mid} [{lo}, {hi}]")
            seeds.append(f"{name}: " + " / ".join(_figure(v, kind) for v in values))
        lines.append(f"| {finding} | {paper} | {'; '.join(spread)} | {'; '.join(seeds)} |")
    return lines


def main() -> None:
    out, seeds = Path(sys.argv[1]), sys.argv[2:]
    runs: dict[str, dict[str, Any]] = {}
    bases: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        folder = out / f"seed-{seed}"
        if (folder / "summary.json").exists():
            runs[seed] = json.loads((folder / "summary.json").read_text())
        if seed in runs:  # a full run keeps the base's figures in its summary
            s = runs[seed]
            p1 = s["headline_pass1_tmax"][s["best_arm"]]["base"]
            bases[seed] = {"agreement": s["base_agreement"], "pass1_tmax": p1}
        elif (folder / "base_summary.json").exists():
            bases[seed] = json.loads((folder / "base_summary.json").read_text())
    if bases:
        print("## The base\n")
        print("\n".join(base_table(bases)))
    if runs:
        print("\n## Pass@(1,T_max) on held-out maps, arm - base (paired 95% CI over maps)\n")
        print("\n".join(headline_table(runs)))
        print("\n## Paper vs miniature (best arm vs base)\n")
        print("\n".join(paper_spread(runs)))


if __name__ == "__main__":
    main()
