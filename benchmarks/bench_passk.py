"""Pass@(K,T) surface and task bootstrap: the vectorised code against plain loops, one run.

Surface: ``pass_surface_from_first_success`` (one pass@k table per distinct n, then lookups)
against the anchor, a loop calling the scalar ``pass_at_k`` once per (task, K, T) cell, on the
same records (default 200 tasks x 16 rollouts, T_max 8: 25,600 cells). Bootstrap:
``surface_ci`` (multiplicity weights and one matrix product per chunk) against the anchor
``per_task[idx].mean(axis=1)`` followed by ``np.quantile`` (what the field notes sketch), with the
same index set. Both pairs must agree to 1e-12; the script prints the times and
``ratio = anchor / ours`` (> 1: ours is faster) and the peak size of the anchor's resample array.

Run: ``.venv/bin/python benchmarks/bench_passk.py [--tasks N] [--n R] [--t-max T] [--boot B]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from multiturn_envs.harness.bootstrap import bootstrap_indices, surface_ci
from multiturn_envs.harness.passk import pass_at_k, pass_surface_from_first_success

R = TypeVar("R")


def _records(tasks: int, n: int, t_max: int, seed: int) -> dict[str, list[int | None]]:
    rng = np.random.default_rng(seed)
    hazard = rng.uniform(0.01, 0.4, size=tasks)
    turns = rng.geometric(hazard[:, None], size=(tasks, n))
    return {f"t{i}": [int(x) if x <= t_max else None for x in row] for i, row in enumerate(turns)}


def _loop_surface(runs: dict[str, list[int | None]], t_max: int) -> np.ndarray:
    n_min = min(len(v) for v in runs.values())
    out = np.zeros((len(runs), n_min, t_max))
    for i, turns in enumerate(runs.values()):
        n = len(turns)
        for t in range(1, t_max + 1):
            c = sum(1 for s in turns if s is not None and s <= t)
            for k in range(1, n_min + 1):
                out[i, k - 1, t - 1] = pass_at_k(n, c, k)
    return out


def _best(fn: Callable[[], R], repeats: int) -> tuple[float, R]:
    """Median seconds of ``repeats`` calls, and the last result."""
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--t-max", type=int, default=8)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = _records(args.tasks, args.n, args.t_max, seed=0)

    ours_s, surface = _best(lambda: pass_surface_from_first_success(runs, args.t_max), args.repeats)
    loop_s, reference = _best(lambda: _loop_surface(runs, args.t_max), args.repeats)
    assert np.allclose(surface.per_task, reference, atol=1e-12)
    cells = reference.size
    print(f"surface: {cells} cells; ours {ours_s * 1e3:.1f} ms, scalar loop {loop_s * 1e3:.1f} ms")
    print(f"surface ratio (loop / ours) = {loop_s / ours_s:.1f}")

    per_task = surface.per_task

    def anchor() -> tuple[np.ndarray, np.ndarray]:
        idx = bootstrap_indices(per_task.shape[0], args.boot, seed=0)
        reps = per_task[idx].mean(axis=1)
        low, high = np.quantile(reps, [0.025, 0.975], axis=0)
        return low, high

    boot_s, ci = _best(lambda: surface_ci(surface, n_boot=args.boot, seed=0), args.repeats)
    anchor_s, (low, high) = _best(anchor, args.repeats)
    assert np.allclose(ci.low, low, atol=1e-12) and np.allclose(ci.high, high, atol=1e-12)
    resample_mib = args.boot * per_task.nbytes / 2**20
    print(
        f"bootstrap B={args.boot}: ours {boot_s * 1e3:.1f} ms, fancy-index anchor "
        f"{anchor_s * 1e3:.1f} ms (its resample array: {resample_mib:.0f} MiB)"
    )
    print(f"bootstrap ratio (anchor / ours) = {anchor_s / boot_s:.2f}")


if __name__ == "__main__":
    main()
