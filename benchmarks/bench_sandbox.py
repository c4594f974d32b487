"""Sandbox latency and throughput: the warm pool against a fresh ``docker run`` per submission.

    python benchmarks/bench_sandbox.py [--n 40] [--workers 2]

A submission is a trivial stdin program against 10 tests. Measured in the same run:

* the anchor: a fresh hardened ``docker run --rm`` per submission running the same runner
  (the cost a pool avoids);
* the pool (``DockerSandbox``: one runner session per container, one job per submission):
  latency median / p90 with one client, throughput (submissions/s) with ``--workers`` clients;
* for reference, one ``docker exec`` of the runner per submission into the pool's own
  hardened containers (what the pool did before sessions: the engine's exec floor, ~50 ms);
* the local backend alongside.

It prints the ratios the issue asks for (pool throughput / fresh-run throughput >= 4, pool
median <= 100 ms) and the pool's memory footprint per container and in total. Timings depend
on the machine's load; compare ratios, which are measured under the same load.
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from multiturn_envs.sandbox.base import RunLimits, RunResult, TestCase
from multiturn_envs.sandbox.docker_pool import DockerSandbox
from multiturn_envs.sandbox.engine import IMAGE, docker_unavailable
from multiturn_envs.sandbox.exec_session import pop_frames
from multiturn_envs.sandbox.hardening import CODE_UID
from multiturn_envs.sandbox.jobs import RUNNER_PATH, job_bytes, parse_report
from multiturn_envs.sandbox.local import LocalSandbox

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = [TestCase("stdio", f"{i} {i}", str(2 * i)) for i in range(10)]
LIMITS = RunLimits()


def fresh_docker_run(program: str, tests: list[TestCase], limits: RunLimits) -> RunResult:
    """The anchor: one hardened container per submission, removed afterwards."""
    job = b"".join(
        job_bytes(
            "/tmp/program.py", "/tmp/scratch", tests, limits, kill_all=True, program_source=program
        )
    )
    command = [
        "docker",
        "run",
        "--rm",
        "-i",
        "--network",
        "none",
        "--read-only",
        "--tmpfs",
        "/tmp:rw,nosuid,nodev,size=64m,mode=1777",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--pids-limit",
        "64",
        "--memory",
        "512m",
        "--memory-swap",
        "512m",
        "--cpus",
        "1",
        "--init",
        "--user",
        "65534:65534",
        "-v",
        f"{RUNNER_PATH}:/opt/runner.py:ro",
        "--label",
        "multiturn-envs.sandbox=bench",
        IMAGE,
        "python3",
        "-I",
        "/opt/runner.py",
        "-",
    ]
    done = subprocess.run(command, input=job, capture_output=True, timeout=120)
    return parse_report(done.stdout.decode(), tests, "docker-run", None)


class ExecPerSubmission:
    """The pool's own hardened containers, but one ``docker exec`` of the runner per submission."""

    def __init__(self, n: int) -> None:
        self.pool = DockerSandbox(size=n)  # its settings, client and labels; no session starts
        self.idle: queue.Queue[Any] = queue.Queue()
        for _ in range(n):
            self.idle.put(self.pool.hardened_container())

    def run(self, program: str, tests: list[TestCase], limits: RunLimits) -> RunResult:
        job = self.pool.submission_job(program, tests, limits)  # the pool's own job, guard, wipe
        container = self.idle.get()
        try:
            api = self.pool._client.api
            command = ["python3", "-I", "/job/runner.pyc", "-"]
            user = f"{CODE_UID}:{CODE_UID}"
            exec_id = api.exec_create(container.id, command, stdin=True, user=user)["Id"]
            sock = api.exec_start(exec_id, socket=True)
            raw = getattr(sock, "_sock", sock)
            raw.sendall(job)
            raw.shutdown(socket.SHUT_WR)
            frames = bytearray()
            while chunk := raw.recv(65536):
                frames.extend(chunk)
            sock.close()
        finally:
            self.idle.put(container)
        out = b"".join(chunk for kind, chunk in pop_frames(frames) if kind == 1)
        return parse_report(out.decode(), tests, "docker-exec", None)

    def close(self) -> None:
        while not self.idle.empty():
            self.idle.get().remove(force=True, v=True)
        self.pool.close()


def measure(run: Callable[[], RunResult], n: int, workers: int) -> tuple[list[float], float]:
    """Per-submission latencies (s) and throughput (submissions/s) with ``workers`` clients."""
    run()  # warm-up (starts pool containers, caches)

    def one(_: int) -> float:
        start = time.perf_counter()
        result = run()
        if not result.all_passed:
            raise RuntimeError(f"benchmark submission failed: {result.error}")
        return time.perf_counter() - start

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        latencies = list(pool.map(one, range(n)))
    return latencies, n / (time.perf_counter() - start)


def summary(name: str, latencies: list[float], throughput: float) -> str:
    q = statistics.quantiles(latencies, n=10)
    return (
        f"{name:<22} median {1000 * statistics.median(latencies):7.1f} ms  "
        f"p90 {1000 * q[-1]:7.1f} ms  throughput {throughput:6.2f} submissions/s"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40, help="submissions per measurement")
    parser.add_argument("--workers", type=int, default=2, help="concurrent clients (2 cores)")
    args = parser.parse_args()
    problem = docker_unavailable()
    if problem:
        print(f"docker backend unavailable: {problem}")
        return 1
    with open("/proc/loadavg") as f:
        print(f"load average at start: {f.read().split()[0]} on {os.cpu_count()} CPUs")
    print(
        f"submission: trivial stdin program x {len(TESTS)} tests; n={args.n}, "
        f"workers={args.workers}"
    )
    rows = {}
    with DockerSandbox(size=args.workers) as pool:
        lat1, thr1 = measure(lambda: pool.run(PROGRAM, TESTS, LIMITS), args.n, 1)
        latw, thr = measure(lambda: pool.run(PROGRAM, TESTS, LIMITS), args.n, args.workers)
        rows["pool (1 client)"] = (lat1, thr1)
        rows[f"pool ({args.workers} clients)"] = (latw, thr)
        sizes = pool.footprint()
    execs = ExecPerSubmission(args.workers)
    try:
        rows[f"exec/submission ({args.workers} cl.)"] = measure(
            lambda: execs.run(PROGRAM, TESTS, LIMITS), args.n, args.workers
        )
    finally:
        execs.close()
    fresh_lat, fresh_thr = measure(
        lambda: fresh_docker_run(PROGRAM, TESTS, LIMITS), max(args.n // 2, 10), args.workers
    )
    rows[f"docker run ({args.workers} clients)"] = (fresh_lat, fresh_thr)
    local = LocalSandbox(quiet=True)
    rows[f"local ({args.workers} clients)"] = measure(
        lambda: local.run(PROGRAM, TESTS, LIMITS), args.n, args.workers
    )
    for name, (lat, rate) in rows.items():
        print(summary(name, lat, rate))
    pool_median = statistics.median(lat1) * 1000
    ratio = thr / fresh_thr
    print(
        f"pool throughput / docker-run throughput: {ratio:.2f}x (target >= 4x: "
        f"{'met' if ratio >= 4 else 'NOT met'})"
    )
    print(
        f"pool median latency (1 client): {pool_median:.1f} ms (target <= 100 ms: "
        f"{'met' if pool_median <= 100 else 'NOT met'})"
    )
    per = [v / 2**20 for v in sizes.values()]
    if per:
        print(
            f"pool memory: {len(per)} containers, {statistics.mean(per):.1f} MiB each "
            f"(after the runs), {sum(per):.1f} MiB total"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
