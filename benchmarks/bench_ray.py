"""Ray executor throughput: trajectories (and tasks) per second for 1 and 2 Ray workers against
the local executor on the same work, measured in the same run.

Two workloads, both MT/FrozenLake-v0 with the random baseline:

* ``cpu``: the env as it is (pure Python, ~tens of microseconds a step): what sharding buys when
  the runner itself is the bottleneck, net of Ray's actor start and record streaming.
* ``latency``: every ``step`` also waits ``--step-ms`` (default 2 ms), as a sandboxed env waits
  on its container: what sharding buys when workers mostly wait, i.e. DeepCoder-MT on Docker.

Each Ray run includes its actors' start-up (a real run pays it too); ``ray.init`` itself is
measured once and printed apart. Per worker, ``in_flight`` and ``workers`` equal the local
run's, so the 2-worker run holds twice the episodes in flight (that is how one scales out).

    .venv/bin/python benchmarks/bench_ray.py [--tasks 100] [--samples 8] [--step-ms 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import multiturn_envs  # noqa: F401  (registers MT/*)
from multiturn_envs.harness import EvalConfig, read_run, run_eval
from multiturn_envs.harness.ray_executor import RayExecutor
from multiturn_envs.policies.baselines import RandomPolicy
from multiturn_envs.wrappers import text_env_of

ENV_ID = "MT/FrozenLake-v0"


class StepLatency(gym.Wrapper[str, str, str, str]):
    """Waits ``delay_s`` in every ``step``: the latency of a sandboxed env, without Docker."""

    def __init__(self, env: gym.Env[str, str], delay_s: float) -> None:
        super().__init__(env)
        self.delay_s = delay_s

    def step(self, action: str) -> Any:
        time.sleep(self.delay_s)
        return self.env.step(action)


class LatencyEnvFactory:
    """A picklable ``make_env`` for the latency workload (it travels to the Ray workers)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __call__(self) -> gym.Env[str, str]:
        return StepLatency(gym.make(ENV_ID, disable_env_checker=True), self.delay_s)


def run_once(
    label: str, cfg: EvalConfig, out: Path, executor: Any, make_env: Any, in_flight: int
) -> tuple[float, int]:
    t0 = time.perf_counter()
    summary = run_eval(
        cfg,
        RandomPolicy(),
        str(out),
        in_flight=in_flight,
        progress=False,
        overwrite=True,
        executor=executor,
        make_env=make_env,
    )
    wall = time.perf_counter() - t0
    assert summary.written == cfg.total(), f"{label}: {summary.written} of {cfg.total()}"
    return wall, summary.written


def stable(path: Path) -> dict[Any, Any]:
    out = {}
    for rec in read_run(path).records:
        rec = dict(rec)
        rec.pop("timings")
        out[(rec["task_id"], rec["sample"], rec["max_turns"])] = rec
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--workloads", default="cpu,latency")
    args = parser.parse_args()

    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"ray.init (local, 2 CPUs): {time.perf_counter() - t0:.1f} s (not counted below)")
    probe = gym.make(ENV_ID)
    tasks = [str(t) for t in text_env_of(probe).task_ids()][: args.tasks]
    probe.close()
    cfg = EvalConfig(
        env_id=ENV_ID,
        policy="random",
        tasks=tasks,
        samples=args.samples,
        max_turns=args.max_turns,
        seed=0,
    )
    print(
        f"work: {len(tasks)} tasks x K={args.samples}, T={args.max_turns} "
        f"= {cfg.total()} trajectories; in_flight {args.in_flight} per worker"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
            for workload in args.workloads.split(","):
                make_env = LatencyEnvFactory(args.step_ms / 1000) if workload == "latency" else None
                title = f"latency ({args.step_ms:g} ms/step)" if make_env else "cpu"
                print(f"\n[{title}]")
                runs = {
                    "local": None,
                    "ray x1": RayExecutor(num_workers=1),
                    "ray x2": RayExecutor(num_workers=2),
                }
                rates: dict[str, float] = {}
                files: dict[str, Path] = {}
                for label, executor in runs.items():
                    files[label] = Path(tmp) / f"{workload}-{label.replace(' ', '')}.jsonl"
                    wall, n = run_once(label, cfg, files[label], executor, make_env, args.in_flight)
                    rates[label] = n / wall
                    print(
                        f"  {label:7s} {wall:7.2f} s  {n / wall:8.1f} trajectories/s  "
                        f"{n / wall / args.samples:7.1f} tasks/s  "
                        f"ratio vs local {rates[label] / rates['local']:.2f}"
                    )
                same = all(stable(files[k]) == stable(files["local"]) for k in files)
                print(f"  records equal to local's (timings aside): {same}")
                print(f"  ratio ray x2 / ray x1: {rates['ray x2'] / rates['ray x1']:.2f}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
