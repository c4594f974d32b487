"""DeepCoder submissions and Terminal resets on one local engine, one remote engine and two.

    sudo python benchmarks/bench_engines.py [--n 40] [--clients 2] [--resets 8]

The remote engine is a second ``dockerd`` this benchmark starts for itself
(:class:`~multiturn_envs.testing.engines.SecondEngine`: its own network namespace behind a veth
pair, reached over TCP+TLS; needs root) and stops at the end. Rows, all in this run:

* a DeepCoder submission (a stdin program, 10 tests) on a pool of ``--clients`` containers:
  latency median / p90 with one client, throughput with ``--clients`` clients, on this
  machine's engine (the anchor), on the remote engine alone, and on both (placed by load);
* the latency a remote engine adds: the engine's own round trip (``/_ping``) and a submission's
  median, remote minus local;
* MT/Terminal-v0 on the remote engine: a reset from the warm pool vs an episode on a fresh
  container there (create + files + shell).

On one machine the "remote" engine shares this machine's CPUs: two engines do not add cores
here, so the two-engine row shows what placement costs, not what a second machine would add.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from timing import median_p90_ms, time_calls  # benchmarks/timing.py

from multiturn_envs.sandbox.base import RunLimits, TestCase
from multiturn_envs.sandbox.docker_engine import DockerEngine
from multiturn_envs.sandbox.docker_pool import DockerSandbox
from multiturn_envs.testing.engines import SecondEngine, second_engine_problem

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = [TestCase("stdio", f"{i} {i}", str(2 * i)) for i in range(10)]
LIMITS = RunLimits()


def _submissions(engines: list[str], n: int, clients: int) -> tuple[float, float, float]:
    """Median and p90 latency (ms) with one client, and submissions/s with ``clients``."""
    with DockerSandbox(size=clients, engines=engines) as pool:

        def one() -> None:
            result = pool.run(PROGRAM, TESTS, LIMITS)
            if not result.all_passed:
                raise RuntimeError(f"a submission failed: {result.error}")

        for _ in range(clients * 2):  # warm every container of the pool
            one()
        median, p90 = median_p90_ms(time_calls(one, n))
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as workers:
            list(workers.map(lambda _: one(), range(n)))
        return median, p90, n / (time.perf_counter() - start)


def _ping_ms(address: str, n: int) -> float:
    engine = DockerEngine.shared(address)
    return median_p90_ms(time_calls(engine.client.ping, n))[0]


def _terminal_rows(address: str, resets: int) -> tuple[float, float]:
    """Median ms: a reset from the warm pool, and an episode on a fresh container."""
    from multiturn_envs.envs.terminal.env import TerminalEnv
    from multiturn_envs.sandbox.shell_session import ShellSession
    from multiturn_envs.sandbox.task_box import agent_spec
    from multiturn_envs.sandbox.trees import put_trees

    task = "rename-extensions"
    env = TerminalEnv(max_turns=None, end_on_success=False, warm=1, engines=address)
    try:
        env.reset(seed=0, options={"task_id": task})
        warm = []
        for _ in range(resets):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if all(p.ready_count() >= 1 for p in env._pools.values()):
                    break
                time.sleep(0.02)
            start = time.perf_counter()
            env.reset(seed=0, options={"task_id": task})
            warm.append(time.perf_counter() - start)
        prepared = env.prepared(task)
        provider = env.provider()
        spec = agent_spec(prepared.layout, prepared.root, env.limits)

        def fresh() -> None:
            box = provider.create(spec)
            try:
                put_trees(box, prepared.initial)
                shell = ShellSession(
                    box,
                    user=prepared.agent_user,
                    workdir=prepared.workdir,
                    environment=prepared.agent_env,
                )
                shell.run("true")
                shell.close()
            finally:
                box.close()

        return median_p90_ms(warm)[0], median_p90_ms(time_calls(fresh, resets))[0]
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40, help="submissions per row")
    parser.add_argument("--clients", type=int, default=2, help="concurrent clients (and pool)")
    parser.add_argument("--resets", type=int, default=8, help="episodes per Terminal row")
    args = parser.parse_args()
    problem = second_engine_problem()
    if problem is not None:
        raise SystemExit(f"bench_engines: {problem}")
    with SecondEngine() as second:
        remote = second.tls_address("remote")
        rows = {
            "local engine": _submissions(["local"], args.n, args.clients),
            "remote engine (TLS)": _submissions([remote], args.n, args.clients),
            "two engines (local + remote)": _submissions(["local", remote], args.n, args.clients),
        }
        ping_local, ping_remote = _ping_ms("local", args.n), _ping_ms(remote, args.n)
        warm, fresh = _terminal_rows(remote, args.resets)
        DockerEngine.close_shared()
    print(f"DeepCoder submission, {len(TESTS)} tests, pool of {args.clients}:")
    print(f"{'engines':32s} {'median ms':>10s} {'p90 ms':>8s} {'subm/s':>8s}")
    for name, (median, p90, rate) in rows.items():
        print(f"{name:32s} {median:10.1f} {p90:8.1f} {rate:8.1f}")
    anchor = rows["local engine"]
    for name in ("remote engine (TLS)", "two engines (local + remote)"):
        median, _, rate = rows[name]
        print(
            f"{name} / local: latency {median / anchor[0]:.2f}x, throughput {rate / anchor[2]:.2f}x"
        )
    added = rows["remote engine (TLS)"][0] - anchor[0]
    print(
        f"engine round trip (/_ping): local {ping_local:.2f} ms, remote over TLS "
        f"{ping_remote:.2f} ms; a submission on the remote engine takes {added:+.1f} ms"
    )
    print(
        f"Terminal on the remote engine: reset from the warm pool {warm:.0f} ms, episode on a "
        f"fresh container {fresh:.0f} ms: fresh / warm = {fresh / warm:.1f}x"
    )


if __name__ == "__main__":
    main()
