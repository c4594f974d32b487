"""What one hostile submission costs: ``env.step`` wall time on a 7-test DeepCoder problem.

    python benchmarks/bench_sandbox_hostile.py [--timeout 6.0] [--backend docker] [--programs ...]

Each program is submitted once under the env's defaults (stop at the first timeout, deadline
``timeout * (1 + n_tests / 4)``) and once under the behaviour before them, the anchor measured
in the same run (``after_timeout="continue"``, ``deadline_s=None``: every test at its limit,
7 x 6 s = 42 s for a loop). Printed: seconds per step, tests run / not run, and the ratio.
Then a flood of 4 GiB on stderr against the same flood on stdout (the anchor), both followed
by the right answer: each must be stopped at the output cap, so the ratio is near 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

from multiturn_envs.envs.deepcoder.env import DeepCoderEnv

TASK = "bundled/sum-two"  # 7 stdin tests
PROGRAMS = {
    "loop": "while True:\n    pass\n",
    "sleep": "import time\ntime.sleep(600)\n",
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
        "        os.execv('/bin/sleep', ['sleep', '600'])\n"
    ),
    "stderr flood": "import sys\nwhile True:\n    sys.stderr.write('y' * 65536)\n",
    "slow on every test": "import time\ntime.sleep({slow})\nprint(0)\n",
    "wrong answer": "print(0)\n",
}
FLOOD = (
    "import sys\nblock = 'y' * (1 << 20)\nfor _ in range(4096):\n    sys.{stream}.write(block)\n"
    "print(sum(map(int, sys.stdin.read().split())))\n"
)
"""4 GiB to one stream, then the right answer (the issue 29 case)."""


def step_cost(env: DeepCoderEnv, program: str) -> tuple[float, int, int]:
    """(seconds, tests run, tests not run) of one submission."""
    started = time.monotonic()
    _, _, _, _, info = env.step(f"```python\n{program}```")
    seconds = time.monotonic() - started
    return seconds, info["n_tests"] - info["n_not_run"], info["n_not_run"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=6.0, help="per-test limit (s)")
    parser.add_argument("--backend", default="docker")
    parser.add_argument(
        "--programs",
        nargs="*",
        choices=list(PROGRAMS),
        default=list(PROGRAMS),
        help="the hostile programs to time (none: the output floods only)",
    )
    parser.add_argument("--flood-pairs", type=int, default=4, help="stdout/stderr flood pairs")
    args = parser.parse_args()
    common = {"backend": args.backend, "max_turns": 1000, "timeout_s": args.timeout}
    envs = {
        "now": DeepCoderEnv(**common),
        "before": DeepCoderEnv(**common, after_timeout="continue", deadline_s=None),
    }
    for env in envs.values():
        env.reset(seed=0, options={"task_id": TASK})
        env.step("```python\nprint(1)\n```")  # the sandbox starts here, off the clock
    n = len(envs["now"].task.tests)
    print(f"{TASK}: {n} tests, per-test limit {args.timeout} s, backend {args.backend}")
    print(f"{'program':<20} {'before':>8} {'now':>8} {'ratio':>7}  run/not run now")
    for name in args.programs:
        program = PROGRAMS[name].format(slow=round(args.timeout * 0.98, 2))
        before, _, _ = step_cost(envs["before"], program)
        now, ran, skipped = step_cost(envs["now"], program)
        print(f"{name:<20} {before:7.1f}s {now:7.1f}s {before / now:6.1f}x  {ran} / {skipped}")
    # A flood on stderr must cost what one on stdout costs (issue 29): the stdout flood is the
    # anchor, in the same run, on the same env, in pairs whose order alternates (each program a
    # fresh submission: the env caches a repeated one)
    print(f"\n4 GiB per test to one stream, then the answer ({args.flood_pairs} pairs):")
    ratios = []
    for i in range(args.flood_pairs):
        seconds = {}
        for stream in ("stdout", "stderr") if i % 2 == 0 else ("stderr", "stdout"):
            program = FLOOD.format(stream=stream) + f"# pair {i}\n"
            seconds[stream], ran, skipped = step_cost(envs["now"], program)
            print(f"  pair {i} {stream}: {seconds[stream]:6.2f}s  {ran} / {skipped}")
        ratios.append(seconds["stderr"] / seconds["stdout"])
    print(f"median of the pairs' stderr / stdout = {statistics.median(ratios):.2f}")
    for env in envs.values():
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
