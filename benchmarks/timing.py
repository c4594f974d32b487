"""Timing helpers the engine and terminal benchmarks share (imported as a sibling script:
``python benchmarks/bench_*.py`` puts this folder on the path)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_p90_ms(samples: list[float]) -> tuple[float, float]:
    """The median and the 90th percentile of ``samples`` (seconds), in milliseconds."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.9 * (len(ordered) - 1))] * 1e3


def time_calls(fn: Callable[[], object], n: int) -> list[float]:
    """The wall time of ``n`` calls of ``fn``, one after another (seconds each)."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out
