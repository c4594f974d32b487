"""Env server benchmark: latency the server adds to a step, and steps/s with N concurrent clients.

For each env (FrozenLake, InterCode-SQL) and each N in ``--clients``:

* **Anchor**: the same steps in-process (``env.step`` on a local env, same tasks, same
  actions), timed per step, measured in the same run.
* **Served**: a ``multiturn-envs serve`` child process on 127.0.0.1; N client threads, each
  with its own WebSocket session (OpenEnv's frames, as ``GenericEnvClient`` sends them), each
  stepping its own episode back to back for ``--seconds``; per-step round-trip latency and the
  total steps/s.

Printed: p50/p99 of in-process steps, of served round trips, the p50/p99 *added* (served minus
in-process at the same quantile), steps/s served, and the ratio served/in-process steps/s.

``--isolation`` serves each env under each of the named modes in turn (``auto``: the server's
default; ``pool``, ``process``, ``thread``: docs/security.md), one server each, and ends with a
table of each mode's ratio over the first mode's, per env and number of clients.

Run: ``.venv/bin/python benchmarks/bench_server.py`` (``--quick`` for a short run;
``--isolation thread process pool`` for an A/B of the isolation modes).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
from websockets.sync.client import connect

import multiturn_envs  # noqa: F401
from multiturn_envs.server.process import ServerProcess
from multiturn_envs.server.remote_env import ws_url

ENVS = ("MT/FrozenLake-v0", "MT/InterCode-SQL-v0")
MAX_TURNS = 8


def action_pool(env_id: str, tasks: list[str], n: int) -> dict[str, list[str]]:
    """Per task, ``n`` well-formed random actions drawn at its start state (seeded)."""
    env = gym.make(env_id, disable_env_checker=True)
    base = env.unwrapped
    pools = {}
    for i, task in enumerate(tasks):
        env.reset(seed=i, options={"task_id": task})
        rng = np.random.default_rng(i)
        pools[task] = [base.random_action(rng) for _ in range(n)]
    env.close()
    return pools


def in_process(env_id: str, pools: dict[str, list[str]], steps: int) -> list[float]:
    """Per-step seconds of ``env.step`` on a local env, episodes back to back."""
    env = gym.make(env_id, disable_env_checker=True, max_turns=MAX_TURNS)
    tasks = list(pools)
    times: list[float] = []
    episode = 0
    while len(times) < steps:
        task = tasks[episode % len(tasks)]
        env.reset(seed=episode, options={"task_id": task})
        for action in pools[task]:
            t0 = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            times.append(time.perf_counter() - t0)
            if terminated or truncated:
                break
        episode += 1
    env.close()
    return times


def client(url: str, pools: dict[str, list[str]], until: float, idx: int, out: list[float]) -> None:
    """One session: episodes back to back until ``until``; appends round-trip seconds."""
    tasks = list(pools)
    with connect(ws_url(url), max_size=None, compression=None) as ws:
        episode = 0
        while time.perf_counter() < until:
            task = tasks[(idx + episode) % len(tasks)]
            reset = {"seed": episode, "task_id": task, "max_turns": MAX_TURNS}
            ws.send(json.dumps({"type": "reset", "data": reset}))
            json.loads(ws.recv(timeout=60))
            for action in pools[task]:
                t0 = time.perf_counter()
                ws.send(json.dumps({"type": "step", "data": {"text": action}}))
                reply: dict[str, Any] = json.loads(ws.recv(timeout=60))
                out.append(time.perf_counter() - t0)
                if reply["data"]["done"] or time.perf_counter() >= until:
                    break
            episode += 1


def served(
    url: str, pools: dict[str, list[str]], n: int, seconds: float
) -> tuple[list[float], float]:
    """Round-trip seconds of all clients' steps, and the wall time they ran."""
    results: list[list[float]] = [[] for _ in range(n)]
    start = time.perf_counter()
    until = start + seconds
    threads = [
        threading.Thread(target=client, args=(url, pools, until, i, results[i])) for i in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return [x for r in results for x in r], wall


def ms(values: list[float], q: float) -> float:
    return float(np.quantile(values, q)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="1 and 8 clients, 2 s each")
    parser.add_argument(
        "--isolation",
        nargs="+",
        default=["auto"],
        choices=["auto", "pool", "process", "thread"],
        help="serve under each of these modes in turn (default: the server's default)",
    )
    parser.add_argument("--envs", nargs="+", default=list(ENVS), help="env ids to serve")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.seconds = [1, 8], 2.0
    ratios: dict[tuple[str, str, int], float] = {}
    for env_id in args.envs:
        probe = gym.make(env_id, disable_env_checker=True)
        tasks = [str(t) for t in probe.unwrapped.task_ids()[:8]]
        probe.close()
        pools = action_pool(env_id, tasks, MAX_TURNS)
        local = in_process(env_id, pools, 3000)
        local_rate = len(local) / sum(local)
        print(
            f"\n{env_id}: in-process step p50 {ms(local, 0.5):.3f} ms, "
            f"p99 {ms(local, 0.99):.3f} ms, {local_rate:.0f} steps/s (one thread)"
        )
        for isolation in args.isolation:
            flags = ["--max-sessions", str(max(args.clients) + 4), "--isolation", isolation]
            with ServerProcess(env_id, args=flags) as url:
                served(url, pools, 1, 0.5)  # warm-up: imports, first sessions, caches
                print(f"  --isolation {isolation}")
                for n in args.clients:
                    rtt, wall = served(url, pools, n, args.seconds)
                    rate = len(rtt) / wall
                    ratios[env_id, isolation, n] = rate / local_rate
                    print(
                        f"  {n:3d} clients: round trip p50 {ms(rtt, 0.5):7.3f} ms, "
                        f"p99 {ms(rtt, 0.99):7.3f} ms | added p50 "
                        f"{ms(rtt, 0.5) - ms(local, 0.5):7.3f} ms, p99 "
                        f"{ms(rtt, 0.99) - ms(local, 0.99):7.3f} ms | {rate:7.0f} steps/s "
                        f"= {rate / local_rate:.3g}x in-process"
                    )
    if len(args.isolation) > 1:
        first = args.isolation[0]
        print(f"\nserved steps/s of each mode over --isolation {first}'s, same run:")
        for env_id in args.envs:
            for isolation in args.isolation[1:]:
                cells = " ".join(
                    f"{n} clients {ratios[env_id, isolation, n] / ratios[env_id, first, n]:.3g}"
                    for n in args.clients
                )
                print(f"  {env_id} {isolation}: {cells}")


if __name__ == "__main__":
    main()
