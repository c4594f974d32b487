"""DeepCoder episodes in one event loop (the async env API) against the same episodes in turn.

    python benchmarks/bench_async_envs.py [--episodes 16] [--turns 2] [--pool N]

Each episode resets DeepCoder-MT on a task, submits a wrong program (a mutant of the
reference: ``error_action``), then the reference (``expert_action``): ``--turns`` submissions,
each a run of every unit test in the Docker sandbox pool. Measured in the same run:

* the anchor: the episodes one after another, ``env.reset``/``env.step`` (sync);
* the async API: all episodes as coroutines in ONE event loop, ``areset_env``/``astep_env``
  (:mod:`multiturn_envs.core`), which run a container env's reset and step in worker threads,
  so the loop interleaves the episodes while their submissions run in the pool.

``--sleep S`` makes every submitted program sleep S seconds first: runs that wait rather than
compute (slow tests, timeouts), where the overlap shows even on a machine whose CPUs are busy;
the reference programs alone finish in milliseconds and are CPU-bound, so on a saturated
machine nothing can overlap them.

It prints both wall times, the ratio (sync / async) and the pool's size: the goal is a ratio
close to the pool's parallelism (``--pool``, default ``MTE_SANDBOX_POOL_SIZE`` or the CPUs:
each container runs one submission at a time, so more episodes in flight than containers
queue). Both modes see the same episodes (same tasks, seeds and actions) and must agree on
every observation. Timings depend on the machine's load; the ratio is measured under one load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

import multiturn_envs  # noqa: F401  (registers MT/*)
from multiturn_envs.core import areset_env, astep_env
from multiturn_envs.envs.deepcoder.env import extract_program
from multiturn_envs.sandbox.docker_pool import SIZE_VARIABLE, default_pool_size, docker_unavailable


def make_env() -> gym.Env[str, str]:
    return gym.make("MT/DeepCoder-v0", backend="docker", max_turns=8, disable_env_checker=True)


def slowed(action: str, sleep_s: float) -> str:
    """``action``'s program with ``time.sleep(sleep_s)`` first (a submission that waits)."""
    if not sleep_s:
        return action
    program = extract_program(action)
    return f"```python\nimport time as _t\n_t.sleep({sleep_s})\n{program}\n```"


def plan(episodes: int, turns: int, sleep_s: float = 0.0) -> list[tuple[str, int, list[str]]]:
    """(task, seed, actions) per episode: ``turns - 1`` wrong programs, then the reference."""
    env = make_env()
    base: Any = env.unwrapped
    out: list[tuple[str, int, list[str]]] = []
    try:
        for task in base.task_ids():
            if len(out) == episodes:
                break
            env.reset(seed=len(out), options={"task_id": task})
            try:
                expert = base.expert_action()
            except RuntimeError:  # a task without a reference solution
                continue
            rng = np.random.default_rng(len(out))
            wrong = [base.error_action(rng) for _ in range(turns - 1)]
            out.append((str(task), len(out), [slowed(a, sleep_s) for a in [*wrong, expert]]))
    finally:
        env.close()
    if len(out) < episodes:  # fewer tasks than episodes: repeat them with other seeds
        out += [(t, len(out) + i, a) for i, (t, _, a) in enumerate(out[: episodes - len(out)])]
    return out


def episode_sync(env: gym.Env[str, str], task: str, seed: int, actions: list[str]) -> list[str]:
    observations = [env.reset(seed=seed, options={"task_id": task})[0]]
    for action in actions:
        observation, _, terminated, truncated, _ = env.step(action)
        observations.append(observation)
        if terminated or truncated:
            break
    return observations


async def episode_async(
    env: gym.Env[str, str], task: str, seed: int, actions: list[str]
) -> list[str]:
    observations = [(await areset_env(env, seed=seed, options={"task_id": task}))[0]]
    for action in actions:
        observation, _, terminated, truncated, _ = await astep_env(env, action)
        observations.append(observation)
        if terminated or truncated:
            break
    return observations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--pool", type=int, default=None, help="sandbox containers (default: CPUs)")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs each")
    parser.add_argument(
        "--sleep",
        type=float,
        default=0.0,
        help="seconds each submitted program sleeps first (a run that waits, not computes)",
    )
    args = parser.parse_args()
    if args.pool is not None:
        os.environ[SIZE_VARIABLE] = str(args.pool)
    problem = docker_unavailable()
    if problem is not None:
        print(f"docker unavailable: {problem}", file=sys.stderr)
        return 1
    pool = default_pool_size()
    episodes = plan(args.episodes, args.turns, args.sleep)

    def run_sync() -> tuple[float, list[list[str]]]:
        env = make_env()  # a fresh env: its result cache holds nothing of these episodes
        try:
            t0 = time.perf_counter()
            out = [episode_sync(env, *ep) for ep in episodes]
            return time.perf_counter() - t0, out
        finally:
            env.close()

    def run_async() -> tuple[float, list[list[str]]]:
        envs = [make_env() for _ in episodes]

        async def all_at_once() -> list[list[str]]:
            return list(
                await asyncio.gather(*(episode_async(e, *ep) for e, ep in zip(envs, episodes)))
            )

        try:
            t0 = time.perf_counter()
            out = asyncio.run(all_at_once())
            return time.perf_counter() - t0, out
        finally:
            for env in envs:
                env.close()

    run_async()  # warm every container of the shared pool: neither mode pays a start-up
    timings: dict[str, list[float]] = {"sync": [], "async": []}
    for _ in range(args.repeats):
        sync_s, sync = run_sync()
        async_s, concurrent = run_async()
        timings["sync"].append(sync_s)
        timings["async"].append(async_s)
    sync_s, async_s = min(timings["sync"]), min(timings["async"])
    if concurrent != sync:
        print("the two modes disagree on an observation", file=sys.stderr)
        return 1
    submissions = sum(len(o) - 1 for o in sync)
    print(f"{len(episodes)} DeepCoder episodes, {submissions} submissions, pool of {pool}")
    print(f"one after another (sync):   {sync_s:7.2f} s (best of {args.repeats})")
    print(f"one event loop (async API): {async_s:7.2f} s (best of {args.repeats})")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"ratio sync/async: {sync_s / async_s:.2f} (goal: close to the pool's {pool})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
