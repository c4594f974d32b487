"""The study over seeds: the pre-registered conclusion, pooled over seeds and held-out maps.

    python examples/study/spread.py runs/study 0 1 2 3

Reads ``<out>/seed-<s>/summary.json`` (a full run of ``study.py``) or, where there is none,
``<out>/seed-<s>/base_summary.json`` (``--base-only``), and prints markdown:

1. the runs' fingerprints (what must match for two runs to give the same digits);
2. the **conclusion**: each claim stated before the runs (config ``headline.claims``: RL's
   advantage shrinks with K, RL's Pass@(1,T_max) gain, and two of the paper's findings the
   miniature is set to test), its figure pooled over the seeds and the held-out maps (or the
   compared states) with a 95% interval that resamples both (``pooled_bootstrap_ci``), and
   whether the interval lies on the claimed side of its bound;
3. the paper's findings next to the pooled figures, every figure with its interval;
4. every seed's figures: the base, every arm's gain, the paper table's median and range.

One seed is one draw of a chaotic training run; a machine with another floating-point path
draws another. The pooled conclusion is what should not change from machine to machine; the
per-seed digits will. Runs whose configs differ (the fingerprint's ``config_digest``: the study
config without seed and threads) are not pooled: exit 2 with the seeds of each config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from study import CLAIM_FIGURES, _figure, paper_rows

from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.harness import pooled_bootstrap_ci
from multiturn_envs.untrusted import load_json

SUMMARY_MAX_BYTES = 64 << 20
"""A seed's summary is ~200 KB with one arm, under 1 MB with four; a file past this bound is
not one study.py wrote."""


class SpreadError(Exception):
    """A reason not to pool: the message is printed as is, and the exit status is 2."""


def _ci(d: dict[str, Any]) -> str:
    return f"{d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def _interval(est: float, low: float, high: float, kind: str = "gap") -> str:
    if kind == "pct":
        return f"{100 * est:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"
    if kind == "num":
        return f"{est:.3f} [{low:.3f}, {high:.3f}]"
    return f"{est:+.3f} [{low:+.3f}, {high:+.3f}]"


# ----------------------------------------------------------------------------- reading runs
def load(out: Path, seeds: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Full runs and bases by seed; a seed with neither file, unreadable JSON or no
    fingerprint is a :class:`SpreadError`."""
    runs: dict[str, dict[str, Any]] = {}
    bases: dict[str, dict[str, Any]] = {}
    if not seeds:
        raise SpreadError("usage: spread.py OUT SEED [SEED ...]")
    for seed in seeds:
        folder = out / f"seed-{seed}"
        full, alone = folder / "summary.json", folder / "base_summary.json"
        path = full if full.exists() else alone
        if not path.exists():
            raise SpreadError(f"seed {seed}: neither {full} nor {alone} exists (did it finish?)")
        try:
            data = load_json(path, max_bytes=SUMMARY_MAX_BYTES)
        except (OSError, UntrustedInputError) as exc:
            raise SpreadError(f"seed {seed}: {path} is not readable JSON ({exc})") from exc
        if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), dict):
            raise SpreadError(
                f"seed {seed}: {path} has no fingerprint (written by an older study.py): "
                "rerun that seed"
            )
        if path == full:
            runs[seed] = data
            p1 = data["headline_pass1_tmax"][data["rl_arm"]]["base"]
            bases[seed] = {
                "agreement": data["base_agreement"],
                "pass1_tmax": p1,
                "fingerprint": data["fingerprint"],
            }
        else:
            bases[seed] = data
    return runs, bases


def check_poolable(bases: dict[str, Any]) -> str:
    """The one config digest of all the runs, or a :class:`SpreadError` naming each config's
    seeds: runs of different configs measure different things and are never pooled."""
    by_digest: dict[str, list[str]] = {}
    for seed, b in bases.items():
        by_digest.setdefault(str(b["fingerprint"]["config_digest"]), []).append(seed)
    if len(by_digest) > 1:
        groups = "; ".join(f"config {d}: seeds {', '.join(s)}" for d, s in by_digest.items())
        raise SpreadError(
            f"spread: the runs' configs differ ({groups}); pooling them would mix designs. "
            "Rerun the odd seeds with the same config (and --arms), or spread each config alone."
        )
    return next(iter(by_digest))


def fingerprint_lines(bases: dict[str, Any]) -> list[str]:
    lines = [
        "| seed | torch CPU capability | threads | float-path variables | torch / transformers "
        "/ trl | code | CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    paths = set()
    for seed, b in bases.items():
        f = b["fingerprint"]
        env = ", ".join(f"{k}={v}" for k, v in f["float_path_env"].items()) or "none"
        pk = f["packages"]
        paths.add((f["cpu_capability"], f["threads"], env, f["cpu"], json.dumps(pk)))
        lines.append(
            f"| {seed} | {f['cpu_capability']} | {f['threads']} | {env} | {pk.get('torch')} / "
            f"{pk.get('transformers')} / {pk.get('trl')} | {f.get('commit', 'unknown')} "
            f"| {f['cpu']} |"
        )
    lines.append(
        f"\nOne config (digest `{next(iter(bases.values()))['fingerprint']['config_digest']}`); "
        f"{len(paths)} float path{'s' if len(paths) > 1 else ''} among the runs."
    )
    return lines


# ----------------------------------------------------------------------------- pooled figures
def _per_map(s: dict[str, Any], model: str, k: int, t: int) -> np.ndarray:
    pm = s["per_map"]
    return np.asarray(pm["surfaces"][model])[:, pm["ks"].index(k), pm["ts"].index(t)]


def _pool(values: list[np.ndarray], crossed: bool, n_boot: int) -> tuple[float, float, float]:
    ci = pooled_bootstrap_ci(values, crossed=crossed, n_boot=n_boot, seed=0)
    return float(ci.estimate), float(ci.low), float(ci.high)


def pooled_gap(
    runs: dict[str, Any], arm: str, cells: list[tuple[int, int, float]], n_boot: int
) -> tuple[float, float, float]:
    """sum of ``weight x (Pass@(k,t) arm - base)`` over ``cells``, per map, pooled over seeds
    and maps (the maps are the same under every seed: crossed)."""
    values = [
        sum(w * (_per_map(s, arm, k, t) - _per_map(s, "base", k, t)) for k, t, w in cells)
        for s in runs.values()
    ]
    return _pool([np.asarray(v, dtype=float) for v in values], True, n_boot)


def verdict(claim: dict[str, Any], low: float, high: float) -> str:
    """Whether the interval lies on the claimed side of the claim's bound."""
    if "above" in claim:
        bound, holds, reversed_ = claim["above"], low > claim["above"], high < claim["above"]
        side = "above"
    else:
        bound, holds, reversed_ = claim["below"], high < claim["below"], low > claim["below"]
        side = "below"
    if holds:
        return f"**holds** (the interval lies {side} {bound:g})"
    if reversed_:
        return f"**reversed** (the interval lies on the other side of {bound:g})"
    return f"**not shown** (the interval includes {bound:g})"


def _outcome_rates(outcomes: list[str]) -> np.ndarray:
    return np.array([[o == "win", o == "tie", o == "loss"] for o in outcomes], dtype=float)


def same_state_rates(runs: dict[str, Any], key: str, n_boot: int) -> Any:
    """Better / tied / worse shares of ``key`` ("normal" or "error") states, pooled over seeds
    (each seed's own states: nested), or ``None`` when a seed has no such state."""
    per_seed = [_outcome_rates(s["same_state_outcomes"][key]) for s in runs.values()]
    if any(len(p) == 0 for p in per_seed):
        return None
    return pooled_bootstrap_ci(per_seed, crossed=False, n_boot=n_boot, seed=0)


def continuation(runs: dict[str, Any], n_boot: int) -> Any:
    """RL's, the base's and RL - base success after an injected error, per task, pooled over
    seeds and the tasks every seed continued from (crossed), or ``None`` without such tasks."""
    common = sorted(
        set.intersection(
            *(
                set(s["continuation"]["rl"]["per_task_success"])
                & set(s["continuation"]["base"]["per_task_success"])
                for s in runs.values()
            )
        )
    )
    if not common:
        return None
    per_seed = []
    for s in runs.values():
        rl, base = (s["continuation"][who]["per_task_success"] for who in ("rl", "base"))
        rows = np.array([[rl[t], base[t], rl[t] - base[t]] for t in common])
        per_seed.append(rows)
    return pooled_bootstrap_ci(per_seed, crossed=True, n_boot=n_boot, seed=0)


def claim_figure(
    runs: dict[str, Any], claim: dict[str, Any], n_boot: int
) -> tuple[float, float, float, str] | None:
    """A claim's figure pooled over seeds, ``(estimate, low, high, kind)``, or ``None`` when the
    runs hold no data for it."""
    s0 = next(iter(runs.values()))
    rl, t_max = s0["rl_arm"], int(s0["config"]["t_max"])
    figure = claim["figure"]
    if figure == "gap":
        return (*pooled_gap(runs, rl, [(int(claim.get("k", 1)), t_max, 1.0)], n_boot), "gap")
    if figure == "gap_k_contrast":
        cells = [(int(claim.get("k", 1)), t_max, 1.0), (int(claim["wide_k"]), t_max, -1.0)]
        return (*pooled_gap(runs, rl, cells, n_boot), "gap")
    if figure.startswith("same_state_better_"):
        ci = same_state_rates(runs, figure.rsplit("_", 1)[1], n_boot)
        if ci is None:
            return None
        return float(ci.estimate[0]), float(ci.low[0]), float(ci.high[0]), "pct"
    if figure == "continuation_gain":
        ci = continuation(runs, n_boot)
        if ci is None:
            return None
        return float(ci.estimate[2]), float(ci.low[2]), float(ci.high[2]), "gap"
    raise SpreadError(f"claim figure {figure!r}: this spread.py knows {sorted(CLAIM_FIGURES)}")


def describe(claim: dict[str, Any], t_max: int) -> str:
    """What a claim's figure is, in words, with its K and T."""
    k, figure = int(claim.get("k", 1)), claim["figure"]
    if figure == "gap":
        return f"RL - base at Pass@({k},{t_max})"
    if figure == "gap_k_contrast":
        wide = claim["wide_k"]
        return f"RL - base at Pass@({k},{t_max}) minus RL - base at Pass@({wide},{t_max})"
    return str(CLAIM_FIGURES[figure])


def conclusion(runs: dict[str, Any], n_boot: int) -> list[str]:
    """Every claim of config ``headline.claims``, in order, pooled, with its verdict."""
    s0 = next(iter(runs.values()))
    n_maps = len(s0["per_map"]["tasks"])
    seeds = ", ".join(runs)
    lines = [
        f"Pooled over {len(runs)} seed{'s' if len(runs) > 1 else ''} ({seeds}) and the "
        f"{n_maps} held-out maps (or the states each seed compared); 95% interval resampling "
        f"seeds and maps or states (B={n_boot})"
        + ("" if len(runs) > 1 else "; one seed: the run-to-run spread is not sampled")
        + ". Stated before the runs (config `headline.claims`), in their order:",
        "",
    ]
    t_max = int(s0["config"]["t_max"])
    for i, claim in enumerate(s0["config"]["headline"]["claims"], 1):
        found = claim_figure(runs, claim, n_boot)
        text = claim["statement"].replace("T_max", str(t_max))
        if found is None:
            lines.append(f"{i}. {text}: no data in these runs.")
            continue
        est, low, high, kind = found
        lines.append(
            f"{i}. {text} ({describe(claim, t_max)}): {_interval(est, low, high, kind)}: "
            f"{verdict(claim, low, high)}."
        )
    return lines


def _contrast_ks(s0: dict[str, Any]) -> tuple[int, int]:
    """K and wide K of the first K-contrast claim (1 and 8 without one)."""
    for claim in s0["config"]["headline"]["claims"]:
        if claim["figure"] == "gap_k_contrast":
            return int(claim.get("k", 1)), int(claim["wide_k"])
    return 1, 8


def pooled_paper_table(runs: dict[str, Any], n_boot: int) -> list[str]:
    """The paper's findings next to figures pooled over seeds (and maps or states), each with
    its 95% interval."""
    s0 = next(iter(runs.values()))
    t_max, rl = int(s0["config"]["t_max"]), s0["rl_arm"]
    ks = [k for k in (1, 2, 4, 8, 16) if k in s0["per_map"]["ks"]]
    wide = _contrast_ks(s0)[1]
    ts = [t for t in s0["per_map"]["ts"] if t >= max(1, t_max - 2)]

    def level(model: str) -> tuple[float, float, float]:
        return _pool([_per_map(s, model, 1, t_max) for s in runs.values()], True, n_boot)

    def gap(arm: str, k: int, t: int) -> str:
        return _interval(*pooled_gap(runs, arm, [(k, t, 1.0)], n_boot))

    rows = [
        (
            f"Pass@(1,{t_max}) on held-out maps, base / RL ({rl}) / RL - base",
            "RL above base",
            f"base {_interval(*level('base'), kind='num')}; RL {_interval(*level(rl), kind='num')}"
            f"; gain {gap(rl, 1, t_max)}",
        ),
        (
            f"K sweep: Pass@(K,{t_max}) RL - base",
            "RL stays ahead as K grows",
            "; ".join(f"K={k} {gap(rl, k, t_max)}" for k in ks),
        ),
        (
            f"T sweep: Pass@({wide},T) RL - base",
            "shrinking T shrinks the gain; on some tasks it reverses",
            "; ".join(f"T={t} {gap(rl, wide, t)}" for t in ts),
        ),
    ]
    for key, name, paper in (
        ("normal", "normal states", "42.8 %"),
        ("error", "error states", "65.7 %"),
    ):
        ci = same_state_rates(runs, key, n_boot)
        text = "n/a (a seed has no such states)"
        if ci is not None:
            text = "; ".join(
                f"{label} {_interval(ci.estimate[i], ci.low[i], ci.high[i], 'pct')}"
                for i, label in enumerate(("better", "tied", "worse"))
            )
        states = sum(len(s["same_state_outcomes"][key]) for s in runs.values())
        rows.append(
            (
                f"RL's action better at the same state, {name} ({states} states; ties not better)",
                paper,
                text,
            )
        )
    ci = continuation(runs, n_boot)
    if ci is not None:
        rows.append(
            (
                "Success continuing from an injected error state, RL / base / RL - base",
                "51.3 % vs 38.6 %",
                "; ".join(
                    f"{label} {_interval(ci.estimate[i], ci.low[i], ci.high[i], kind)}"
                    for i, (label, kind) in enumerate(
                        (("RL", "pct"), ("base", "pct"), ("RL - base", "gap"))
                    )
                ),
            )
        )
    if len(s0["config"]["arms"]) > 1:
        rows.append(
            (
                f"Process reward / GiGPO / BudgetMix vs outcome reward: Pass@(1,{t_max}) - base",
                "exact process reward helps on FrozenLake",
                "; ".join(f"{a} {gap(a, 1, t_max)}" for a in s0["config"]["arms"]),
            )
        )
    lines = [
        "| finding | paper (FrozenLake, Qwen3-4B, unless noted) | miniature, pooled over "
        f"{len(runs)} seeds [95% CI] |",
        "|---|---|---|",
    ]
    lines += [f"| {finding} | {paper} | {text} |" for finding, paper, text in rows]
    return lines


# ----------------------------------------------------------------------------- per seed
def base_table(bases: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| seed | held-out p(expert move) greedy | sampled | training greedy | sampled "
        "| held-out Pass@(1,T_max) [95% CI over maps] |",
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


def headline_table(runs: dict[str, dict[str, Any]], n_boot: int) -> list[str]:
    """Per seed: base, RL, RL - base at Pass@(k,T_max) with its CI over maps, the main
    statement's contrast, and every other arm's gain; then the pooled row."""
    s0 = next(iter(runs.values()))
    rl, t_max = s0["rl_arm"], int(s0["config"]["t_max"])
    k, wide = _contrast_ks(s0)
    others = [a for a in s0["headline_pass1_tmax"] if a != rl]
    cells = [f"{a} - base" for a in others]
    lines = [
        "| "
        + " | ".join(
            [
                "seed",
                "base",
                f"RL ({rl})",
                "RL - base [95% CI over maps]",
                f"(RL - base) at K={k} minus at K={wide}",
                *cells,
            ]
        )
        + " |",
        "|" + "---|" * (5 + len(others)),
    ]
    for seed, s in runs.items():
        h = s["headline_pass1_tmax"]
        one = {seed: s}
        contrast = pooled_gap(one, rl, [(k, t_max, 1.0), (wide, t_max, -1.0)], n_boot)
        row = [
            seed,
            f"{h[rl]['base']['estimate']:.3f}",
            f"{h[rl]['arm']['estimate']:.3f}",
            _ci(h[rl]["diff"]),
            _interval(*contrast),
            *(_ci(h[a]["diff"]) for a in others),
        ]
        lines.append("| " + " | ".join(row) + " |")
    base = _pool([_per_map(s, "base", k, t_max) for s in runs.values()], True, n_boot)
    arm = _pool([_per_map(s, rl, k, t_max) for s in runs.values()], True, n_boot)
    row = [
        "pooled",
        _interval(*base, kind="num"),
        _interval(*arm, kind="num"),
        _interval(*pooled_gap(runs, rl, [(k, t_max, 1.0)], n_boot)),
        _interval(*pooled_gap(runs, rl, [(k, t_max, 1.0), (wide, t_max, -1.0)], n_boot)),
        *(_interval(*pooled_gap(runs, a, [(k, t_max, 1.0)], n_boot)) for a in others),
    ]
    lines.append("| " + " | ".join(row) + " |")
    held = sum(s["headline_pass1_tmax"][rl]["diff"]["low"] > 0 for s in runs.values())
    lines.append(
        "\nPer seed, intervals are over maps only (that seed's run is held fixed); RL - base "
        f"excludes 0 on {held} of {len(runs)} seeds alone. The pooled row resamples seeds and maps."
    )
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
            values = [
                np.nan if rows[i][2][j][1] is None else float(rows[i][2][j][1])
                for rows in per_seed.values()
            ]
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


def spread(out: Path, seeds: list[str]) -> str:
    """The whole markdown of ``spread.md`` (a :class:`SpreadError` when the runs cannot be
    pooled)."""
    runs, bases = load(out, seeds)
    check_poolable(bases)
    parts = [f"# The study over seeds {', '.join(seeds)}", "", "## Runs", ""]
    parts += fingerprint_lines(bases)
    if runs:
        n_boot = int(next(iter(runs.values()))["config"]["headline"].get("n_boot", 4000))
        parts += ["", "## Conclusion", "", *conclusion(runs, n_boot)]
        parts += ["", "## Paper vs miniature, pooled over seeds", ""]
        parts += pooled_paper_table(runs, n_boot)
        parts += ["", "## Pass@(1,T_max) on held-out maps, arm - base, per seed and pooled", ""]
        parts += headline_table(runs, n_boot)
    parts += ["", "## The base", "", *base_table(bases)]
    if runs:
        parts += ["", "## Paper vs miniature per seed (RL arm vs base)", ""]
        parts += paper_spread(runs)
    return "\n".join(parts) + "\n"


def main() -> None:
    if len(sys.argv) < 3:
        print("usage: spread.py OUT SEED [SEED ...]", file=sys.stderr)
        raise SystemExit(2)
    try:
        text = spread(Path(sys.argv[1]), sys.argv[2:])
    except SpreadError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from exc
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        print(
            f"spread: a summary lacks what this spread.py reads ({exc!r}): rerun", file=sys.stderr
        )
        raise SystemExit(2) from exc
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
