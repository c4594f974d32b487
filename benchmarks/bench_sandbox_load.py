"""The docker sandbox under RL-like load: 64 episodes in flight, a mixed workload.

    python benchmarks/bench_sandbox_load.py [--episodes 64] [--seconds 40] [--timeout 1.0]

Every episode is a thread that submits programs back to back, as a policy's turns would; a
submission runs 10 stdin tests and is, drawn per submission with a seeded generator:
70% wrong but terminating (prints a wrong answer), 20% correct, 10% hostile (loops forever).
Measured in the same run, each for ``--seconds`` after a warm-up (every episode's first
submission, which is where containers start):

* **anchor, today's design**: a private ``DockerSandbox`` per episode (so as many containers as
  episodes), and no deadline: ``RunLimits(after_timeout="continue", deadline_s=None)``, so a
  hostile submission costs one per-test limit per test;
* **shared pool, no deadline**: ``DockerSandbox.shared()`` (containers = CPUs), the old limits;
* **shared pool + deadline**: the shared pool with the env's defaults (stop at the first
  timeout, deadline ``timeout * (1 + n/4)``).

Printed: submissions/s, tests run/s (tests the runner actually executed) and tests scored/s
(every test of every finished submission), the containers used and their memory (engine cgroup
statistics, page cache excluded), and the ratios to the anchor. Timings depend on the machine's
load; the ratios are measured under the same load.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from multiturn_envs.sandbox.base import RunLimits, RunResult, Sandbox, TestCase, default_deadline
from multiturn_envs.sandbox.docker_pool import DockerSandbox
from multiturn_envs.sandbox.engine import docker_unavailable

TESTS = [TestCase("stdio", f"{i} {i + 1}", str(2 * i + 1)) for i in range(10)]
PROGRAMS = {
    "wrong": "a, b = map(int, input().split())\nprint(a - b)\n",
    "correct": "a, b = map(int, input().split())\nprint(a + b)\n",
    "hostile": "while True:\n    pass\n",
}
MIX = (("wrong", 0.7), ("correct", 0.2), ("hostile", 0.1))


@dataclass
class Tally:
    submissions: int = 0
    tests_run: int = 0
    tests_scored: int = 0
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, result: RunResult, seconds: float) -> None:
        with self.lock:
            self.submissions += 1
            self.tests_scored += len(result.results)
            self.tests_run += sum(not r.not_run for r in result.results)
            self.by_kind.setdefault(kind, []).append(seconds)


def memory_mib(pools: list[DockerSandbox]) -> tuple[int, float]:
    """(containers, MiB in use) over ``pools`` (``DockerSandbox.footprint``)."""
    sizes = [size for pool in pools for size in pool.footprint().values()]
    return len(sizes), sum(sizes) / 2**20


def run_config(
    name: str,
    episodes: int,
    seconds: float,
    sandbox_of: Callable[[int], Sandbox],
    limits: RunLimits,
) -> dict[str, float]:
    tally = Tally()
    stop = threading.Event()
    warm = threading.Barrier(episodes + 1)
    errors: list[str] = []

    def episode(i: int) -> None:
        rng = np.random.default_rng(1000 + i)
        sandbox = sandbox_of(i)
        first = sandbox.run(PROGRAMS["correct"], TESTS, limits)  # warm-up: containers start here
        if first.error:
            errors.append(first.error)
        warm.wait()
        kinds = [k for k, _ in MIX]
        probs = [p for _, p in MIX]
        while not stop.is_set():
            kind = kinds[int(rng.choice(len(kinds), p=probs))]
            started = time.monotonic()
            result = sandbox.run(PROGRAMS[kind], TESTS, limits)
            if result.error:
                errors.append(result.error)
                continue
            if not stop.is_set():
                tally.add(kind, result, time.monotonic() - started)

    threads = [threading.Thread(target=episode, args=(i,), daemon=True) for i in range(episodes)]
    for thread in threads:
        thread.start()
    warm.wait()
    started = time.monotonic()
    time.sleep(seconds)
    stop.set()
    elapsed = time.monotonic() - started
    for thread in threads:
        thread.join(120)
    row = {
        "submissions_s": tally.submissions / elapsed,
        "tests_run_s": tally.tests_run / elapsed,
        "tests_scored_s": tally.tests_scored / elapsed,
        "submissions": tally.submissions,
        "errors": len(errors),
    }
    for kind, times in sorted(tally.by_kind.items()):
        row[f"{kind}_median_s"] = statistics.median(times)
    print(
        f"{name:<34} {row['submissions_s']:7.2f} subm/s {row['tests_run_s']:8.1f} run/s "
        f"{row['tests_scored_s']:8.1f} scored/s  n={tally.submissions:<5} "
        + " ".join(f"{k}={statistics.median(v):.2f}s" for k, v in sorted(tally.by_kind.items()))
        + (f"  sandbox errors={len(errors)}" if errors else ""),
        flush=True,
    )
    return row


def same_pool(pool: DockerSandbox) -> Callable[[int], Sandbox]:
    """Every episode's sandbox is ``pool``."""
    return lambda episode: pool


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--timeout", type=float, default=1.0, help="per-test limit (s)")
    parser.add_argument(
        "--also-size",
        type=int,
        action="append",
        default=[],
        help="also run the shared pool + deadline with this many containers (repeatable)",
    )
    args = parser.parse_args()
    problem = docker_unavailable()
    if problem:
        print(f"docker unavailable: {problem}")
        return 1
    old = RunLimits(timeout_s=args.timeout, after_timeout="continue", deadline_s=None)
    new = replace(old, after_timeout="stop", deadline_s=default_deadline(args.timeout, len(TESTS)))
    print(
        f"{args.episodes} episodes in flight, {len(TESTS)} tests a submission, "
        f"per-test limit {args.timeout} s, {args.seconds:.0f} s per configuration; "
        "mix: " + ", ".join(f"{int(p * 100)}% {k}" for k, p in MIX)
    )
    results: dict[str, dict[str, float]] = {}

    private: list[DockerSandbox] = []
    lock = threading.Lock()

    def own_pool(i: int) -> Sandbox:
        pool = DockerSandbox()
        with lock:
            private.append(pool)
        return pool

    results["anchor"] = run_config(
        "anchor: pool per episode, no cap", args.episodes, args.seconds, own_pool, old
    )
    containers, mib = memory_mib(private)
    results["anchor"].update(containers=containers, memory_mib=mib)
    print(f"{'':<34} {containers} containers, {mib:.0f} MiB")
    for pool in private:
        pool.close()

    configs = [
        ("shared", "shared pool, no cap", None, old),
        ("deadline", "shared pool + stop/deadline", None, new),
    ]
    configs += [(f"size{n}", f"shared pool of {n} + stop/deadline", n, new) for n in args.also_size]
    for key, label, size, limits in configs:
        pool = DockerSandbox.shared() if size is None else DockerSandbox.shared(size=size)
        results[key] = run_config(label, args.episodes, args.seconds, same_pool(pool), limits)
        containers, mib = memory_mib([pool])
        results[key].update(containers=containers, memory_mib=mib)
        stats = pool.stats()
        print(
            f"{'':<34} {containers} containers, {mib:.0f} MiB; most waiting "
            f"{stats['most_waiting']:.0f}, mean queue wait "
            f"{stats['wait_s'] / max(stats['runs'], 1):.2f} s"
        )
        DockerSandbox.shutdown_shared()  # each configuration starts from its own warm-up

    anchor = results["anchor"]
    print("\nratios to the anchor (same run):")
    for key in [k for k in results if k != "anchor"]:
        row = results[key]
        print(
            f"  {key:<9} submissions/s x{row['submissions_s'] / anchor['submissions_s']:.2f}  "
            f"tests run/s x{row['tests_run_s'] / anchor['tests_run_s']:.2f}  "
            f"tests scored/s x{row['tests_scored_s'] / anchor['tests_scored_s']:.2f}  "
            f"memory x{row['memory_mib'] / max(anchor['memory_mib'], 1e-9):.3f} "
            f"({row['containers']:.0f} vs {anchor['containers']:.0f} containers)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
