"""What one hostile submission costs: ``env.step`` wall time on a 7-test DeepCoder problem.

    python benchmarks/bench_sandbox_hostile.py [--timeout 6.0] [--backend docker]

Each program is submitted once under the env's defaults (stop at the first timeout, deadline
``timeout * (1 + n_tests / 4)``) and once under the behaviour before them, the anchor measured
in the same run (``after_timeout="continue"``, ``deadline_s=None``: every test at its limit,
7 x 6 s = 42 s for a loop). Printed: seconds per step, tests run / not run, and the ratio.
"""

from __future__ import annotations

import argparse
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
    for name, template in PROGRAMS.items():
        program = template.format(slow=round(args.timeout * 0.98, 2))
        before, _, _ = step_cost(envs["before"], program)
        now, ran, skipped = step_cost(envs["now"], program)
        print(f"{name:<20} {before:7.1f}s {now:7.1f}s {before / now:6.1f}x  {ran} / {skipped}")
    for env in envs.values():
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
