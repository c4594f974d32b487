"""MT/Terminal-v0: command round trip, reset, oracle and snapshot costs, with their anchors.

    python benchmarks/bench_terminal.py [--n 40] [--resets 8] [--engine ADDRESS]

``--engine`` runs every row on that Docker engine (e.g. ``tcp://HOST:2376?tls=DIR``,
docs/sandbox-scale-out.md) instead of this machine's: the reset rows are then the warm pool vs
a fresh container on a remote engine.

Rows, all measured in this run on hardened containers of the terminal image:

* command round trip in a warm persistent shell (goal: median < 20 ms) vs one
  ``docker exec`` per command (the anchor);
* reset from the warm pool (goal: median < 100 ms) vs a fresh container per episode
  (``docker run`` + shell + files, what a reset costs without a pool: the anchor);
* the oracle's cost per step (goal: median < 50 ms): a step whose command leaves the state
  unchanged (the state read, a cached verdict) and one that changes it (the read + a checker
  run);
* the reset and both steps again with ``keeper=False``: the state read and filled by the
  engine's archive requests alone (the anchor of the keeper,
  :mod:`multiturn_envs.sandbox.state_keeper`);
* snapshots: ``get_state`` and ``set_state`` (the writable directories' tars + shell state onto
  a fresh container) vs deterministic replay (reset + re-running the commands) of the same
  state.
"""

from __future__ import annotations

import argparse
import time

from timing import median_p90_ms, time_calls  # benchmarks/timing.py

from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.sandbox.provider import Box
from multiturn_envs.sandbox.shell_session import ShellSession
from multiturn_envs.sandbox.task_box import agent_spec
from multiturn_envs.sandbox.trees import put_trees


def _wait_ready(env: TerminalEnv, limit_s: float = 20.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if all(pool.ready_count() >= 1 for pool in env._pools.values()):
            return
        time.sleep(0.02)


def oracle_rows(
    env: TerminalEnv, task: str, args: argparse.Namespace, suffix: str
) -> list[tuple[str, float, float]]:
    """Reset from the warm pool and the two kinds of step with their oracle, on ``env``."""
    rows = []
    resets = []
    for _ in range(args.resets):
        _wait_ready(env)
        start = time.perf_counter()
        env.reset(seed=0, options={"task_id": task})
        resets.append(time.perf_counter() - start)
    rows.append(("reset from the warm pool" + suffix, *median_p90_ms(resets)))
    env.reset(seed=0, options={"task_id": task})
    env.step("true")
    unchanged = time_calls(lambda: env.step("pwd"), args.n // 2)
    rows.append(("step, /app unchanged (cached)" + suffix, *median_p90_ms(unchanged)))
    counter = iter(range(10**6))
    changed = time_calls(lambda: env.step(f"echo {next(counter)} > n.txt"), args.n // 2)
    rows.append(("step, /app changed (checker run)" + suffix, *median_p90_ms(changed)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40, help="commands per round-trip row")
    parser.add_argument("--resets", type=int, default=8, help="episodes per reset row")
    parser.add_argument("--engine", default="local", help="the Docker engine (default: local)")
    args = parser.parse_args()
    rows: list[tuple[str, float, float]] = []
    env = TerminalEnv(max_turns=None, end_on_success=False, warm=1, engines=args.engine)
    try:
        task = "rename-extensions"
        env.reset(seed=0, options={"task_id": task})
        prepared = env.prepared(task)
        provider = env.provider()
        spec = agent_spec(prepared.layout, prepared.root, env.limits)

        def make() -> Box:
            return provider.create(spec)

        def new_shell(c: Box) -> ShellSession:
            return ShellSession(
                c,
                user=prepared.agent_user,
                workdir=prepared.workdir,
                environment=prepared.agent_env,
            )

        container = make()
        try:
            put_trees(container, prepared.initial)
            shell = new_shell(container)
            shell.run("true")
            rows.append(
                (
                    "command, warm persistent shell",
                    *median_p90_ms(time_calls(lambda: shell.run("true"), args.n)),
                )
            )
            rows.append(
                (
                    "command, warm shell, `ls -la`",
                    *median_p90_ms(time_calls(lambda: shell.run("ls -la /"), args.n)),
                )
            )

            def exec_once() -> None:
                container.exec(
                    ["bash", "-c", "true"], user=prepared.agent_user, workdir=prepared.workdir
                )

            rows.append(
                ("command, one `docker exec` each", *median_p90_ms(time_calls(exec_once, args.n)))
            )
            shell.close()
        finally:
            container.close()

        rows += oracle_rows(env, task, args, "")

        def fresh() -> None:
            c = make()
            try:
                put_trees(c, prepared.initial)
                new_shell(c)
            finally:
                c.close()

        rows.append(
            ("episode on a fresh `docker run`", *median_p90_ms(time_calls(fresh, args.resets)))
        )

        env.reset(seed=0, options={"task_id": task})
        history = (*env.task(task).solution[:2], "x=1", "mkdir -p a/b", "echo hi > a/b/c")
        for command in history:
            env.step(command)
        state = env.get_state()
        rows.append(("snapshot: get_state", *median_p90_ms(time_calls(env.get_state, 10))))
        sets = []
        for _ in range(6):
            _wait_ready(env)
            start = time.perf_counter()
            env.set_state(state)
            sets.append(time.perf_counter() - start)
        rows.append(("snapshot: set_state (fresh container)", *median_p90_ms(sets)))
        replays = []
        for _ in range(6):
            _wait_ready(env)
            start = time.perf_counter()
            env.reset(seed=0, options={"task_id": task})
            for command in history:  # through the shell alone: a replay needs no checks
                env._episode.shell.run(command)
            replays.append(time.perf_counter() - start)
        rows.append((f"replay: reset + {len(history)} commands", *median_p90_ms(replays)))
    finally:
        env.close()
    anchor = TerminalEnv(
        max_turns=None, end_on_success=False, warm=1, engines=args.engine, keeper=False
    )
    try:
        rows += oracle_rows(anchor, task, args, ", engine reads")
    finally:
        anchor.close()
    print(f"{'row':45s} {'median ms':>10s} {'p90 ms':>9s}")
    for name, median, p90 in rows:
        print(f"{name:45s} {median:10.1f} {p90:9.1f}")
    by = {name: median for name, median, _ in rows}
    print(
        f"\nround trip: exec per command / warm shell = "
        f"{by['command, one `docker exec` each'] / by['command, warm persistent shell']:.1f}x "
        f"(goal: shell median < 20 ms: {by['command, warm persistent shell']:.1f} ms)"
    )
    print(
        f"reset: fresh run per episode / warm pool = "
        f"{by['episode on a fresh `docker run`'] / by['reset from the warm pool']:.1f}x"
    )
    for row, goal in (
        ("reset from the warm pool", 100),
        ("step, /app unchanged (cached)", 50),
        ("step, /app changed (checker run)", 50),
    ):
        print(
            f"{row}: engine reads / keeper = {by[row + ', engine reads'] / by[row]:.1f}x "
            f"(goal: median < {goal} ms: {by[row]:.1f} ms)"
        )
    replay = by[f"replay: reset + {len(history)} commands"]
    restore = by["snapshot: set_state (fresh container)"]
    print(f"snapshot restore: replay / set_state = {replay / restore:.1f}x")


if __name__ == "__main__":
    main()
