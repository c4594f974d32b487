"""Step and reset latency of MT/InterCode-SQL-v0 on the Spider dev databases.

Anchor, measured in the same run: a baseline that re-opens the database file for every step
(connect, run the agent query, run the gold query, close), which is what a naive file-per-query
design costs. Ours runs the query on the episode's in-memory copy and scores it against the
cached gold result. Prints medians (ms) and the ratio baseline / ours. The target is a median
step under 2 ms.

    .venv/bin/python benchmarks/bench_intercode_sql.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv
from multiturn_envs.envs.intercode_sql.conversion import SpiderDevDatabases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    env = InterCodeSQLEnv(tasks="intercode", max_turns=None, end_on_success=False)
    spider = SpiderDevDatabases()
    tasks = [env.task(t) for t in env.task_ids()]
    for task in tasks:  # warm caches: conversion, pristine copies, gold results
        env.reset(options={"task_id": task.task_id})
    steps: list[float] = []
    resets: list[float] = []
    baseline: list[float] = []
    for _ in range(args.rounds):
        for task in tasks:
            query = task.gold
            t0 = time.perf_counter()
            env.reset(options={"task_id": task.task_id})
            t1 = time.perf_counter()
            env.step(query)
            t2 = time.perf_counter()
            env.step("SELECT * FROM sqlite_master LIMIT 3")
            t3 = time.perf_counter()
            resets.append(t1 - t0)
            steps += [t2 - t1, t3 - t2]
            path = spider.path(task.db)
            for q in (query, "SELECT * FROM sqlite_master LIMIT 3"):
                b0 = time.perf_counter()
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                conn.execute(q).fetchall()
                conn.execute(task.gold).fetchall()
                conn.close()
                baseline.append(time.perf_counter() - b0)
    env.close()
    ms = 1000.0
    step, reset, base = (statistics.median(x) * ms for x in (steps, resets, baseline))
    print(f"tasks={len(tasks)} rounds={args.rounds} steps={len(steps)}")
    verdict = "ok" if step < 2 else "MISSED"
    print(f"median step (query + scoring): {step:.3f} ms  (target < 2 ms: {verdict})")
    print(f"median reset (episode copy):   {reset:.3f} ms")
    print(f"median baseline step (re-open file, run query and gold): {base:.3f} ms")
    print(f"ratio baseline / ours (step): {base / step:.2f}x")


if __name__ == "__main__":
    main()
