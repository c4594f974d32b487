"""The Ray executor on a real local Ray (2 CPUs): records equal to the local executor's, a worker
killed for real, a driver killed for real and resumed, the actor-pool placement.

One ``ray.init`` serves the whole module (Ray start-up takes seconds to tens of seconds). The
cluster's processes get ``tests/harness`` on ``PYTHONPATH`` so that workers and the CLI driver of
the resume test can import ``harness_toy``; the policies defined here travel by value
(``cloudpickle.register_pickle_by_value``), so workers need not import this module.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.harness import EvalConfig, run_eval
from multiturn_envs.harness.executors import RayExecutor, shard_keys
from multiturn_envs.harness.records import iter_lines, read_run, record_key
from multiturn_envs.policies.base import Reply, TurnRequest
from multiturn_envs.policies.baselines import RandomPolicy, random_action, seed_words
from multiturn_envs.testing import require

HERE = Path(__file__).resolve().parent
ENV_ID = "MT/FrozenLake-v0"
TASKS = [f"random-s4-p0.8-n{i}" for i in range(6)]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    require(importlib.util.find_spec("ray") is not None, "Ray (pip install 'multiturn-envs[ray]')")
    import ray
    import ray.cloudpickle

    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), old) if p)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def config(**kw: Any) -> EvalConfig:
    base: dict[str, Any] = {
        "env_id": ENV_ID,
        "policy": "random",
        "tasks": TASKS,
        "samples": 4,
        "max_turns": 8,
        "seed": 11,
    }
    base.update(kw)
    return EvalConfig(**base)


def stable(path: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """The records keyed by (task, sample, T), without the wall-clock timings."""
    out = {}
    for rec in read_run(path).records:
        rec = dict(rec)
        rec.pop("timings")
        out[record_key(rec)] = rec
    return out


def trajectory_keys(path: Path) -> list[tuple[str, int, int]]:
    return [record_key(o) for o in iter_lines(path) if o.get("kind") == "trajectory"]


class WordPolicy:
    """Picks one of FrozenLake's words from the turn seed alone: it never reads the env."""

    name = "seed-words"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        words = ("Left", "Down", "Right", "Up")
        return [Reply(text=words[seed_words(r.seed, 1)[0] % 4]) for r in requests]


class KillerPolicy:
    """The random baseline, except that the first worker to reach its ``at_call``-th batch
    SIGKILLs its own process (once per marker file), after a pause that lets the records it
    already finished stream to the driver."""

    name = "killer"

    def __init__(self, marker: str, at_call: int = 3) -> None:
        self.marker, self.at_call, self.calls = marker, at_call, 0

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        self.calls += 1
        if self.calls == self.at_call:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                time.sleep(1.0)
                os.kill(os.getpid(), signal.SIGKILL)
        return [Reply(text=random_action(r.env, r.seed)) for r in requests]


@settings(max_examples=40, deadline=None)
@given(
    n_tasks=st.integers(1, 6),
    samples=st.integers(1, 4),
    grid=st.sets(st.integers(1, 5), min_size=1, max_size=3),
    n_shards=st.integers(1, 30),
    data=st.data(),
)
def test_shards_are_contiguous_task_major_balanced_and_cover_the_pending_keys(
    n_tasks: int, samples: int, grid: set[int], n_shards: int, data: st.DataObject
) -> None:
    tasks = TASKS[:n_tasks]
    cfg = config(
        tasks=tasks, samples=samples, max_turns=5, budget_mode="announced", turn_grid=sorted(grid)
    )
    every = list(cfg.episode_keys())
    done = set(data.draw(st.lists(st.sampled_from(every), max_size=len(every) - 1)))
    shards = shard_keys(cfg, done, n_shards)
    flat = [k for shard in shards for k in shard]
    assert len(flat) == len(set(flat)) and set(flat) == set(every) - done
    assert [tasks.index(k[0]) for k in flat] == sorted(tasks.index(k[0]) for k in flat)
    sizes = [len(shard) for shard in shards]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert len(shards) == min(n_shards, len(flat))


def test_ray_records_equal_the_local_records(ray_cluster: Any, tmp_path: Path) -> None:
    cfg = config()
    run_eval(cfg, RandomPolicy(), str(tmp_path / "local.jsonl"), progress=False)
    summary = run_eval(
        cfg,
        RandomPolicy(),
        str(tmp_path / "ray.jsonl"),
        in_flight=5,
        progress=False,
        executor=RayExecutor(num_workers=2, shards_per_worker=2),
    )
    local, remote = stable(tmp_path / "local.jsonl"), stable(tmp_path / "ray.jsonl")
    assert len(local) == cfg.total() == 24
    assert remote == local
    assert summary.written == 24 and summary.skipped == 0 and summary.lost_workers == 0
    assert len(summary.per_worker) == 2  # both actors ran shards (2 each)
    assert sum(summary.per_worker.values()) == 24
    assert summary.steps == sum(r["turns"] for r in local.values())
    assert (
        read_run(tmp_path / "ray.jsonl").header["config"]
        == read_run(tmp_path / "local.jsonl").header["config"]
    )


def test_a_sandboxed_env_runs_in_the_workers_with_the_local_records(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """DeepCoder-MT: each worker builds its envs, hence its own sandbox, in its own process."""
    import warnings

    from multiturn_envs.policies.baselines import NoisyExpertPolicy

    tasks = ["bundled/climb-stairs", "bundled/count-vowels", "bundled/count-words"]
    cfg = config(
        env_id="MT/DeepCoder-v0",
        policy="noisy-expert:0.5",
        tasks=tasks,
        samples=2,
        max_turns=3,
        env_kwargs={"backend": "local"},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LocalSandbox says it is no security boundary
        run_eval(cfg, NoisyExpertPolicy(0.5), str(tmp_path / "local.jsonl"), progress=False)
    summary = run_eval(
        cfg,
        NoisyExpertPolicy(0.5),
        str(tmp_path / "ray.jsonl"),
        progress=False,
        executor=RayExecutor(num_workers=2),
    )
    local = stable(tmp_path / "local.jsonl")
    assert len(local) == 6 and any(r["success"] for r in local.values())
    assert stable(tmp_path / "ray.jsonl") == local
    assert len(summary.per_worker) == 2


def test_actor_pool_placement_gives_the_local_records(ray_cluster: Any, tmp_path: Path) -> None:
    cfg = config(policy="seed-words", budget_mode="announced", turn_grid=[3, 8], error_after=1)
    run_eval(cfg, WordPolicy(), str(tmp_path / "local.jsonl"), progress=False)
    executor = RayExecutor(num_workers=1, policy_placement="actor-pool", policy_actors=1)
    run_eval(cfg, WordPolicy(), str(tmp_path / "ray.jsonl"), progress=False, executor=executor)
    local = stable(tmp_path / "local.jsonl")
    assert len(local) == 6 * 4 * 2
    assert all(r["error_injection"]["after_expert_steps"] == 1 for r in local.values())
    assert stable(tmp_path / "ray.jsonl") == local


def test_actor_pool_refuses_an_env_reading_policy_clearly(ray_cluster: Any, tmp_path: Path) -> None:
    executor = RayExecutor(num_workers=1, policy_placement="actor-pool")
    with pytest.raises(Exception, match="carry no env"):
        run_eval(
            config(tasks=TASKS[:1]), RandomPolicy(), str(tmp_path / "r.jsonl"), executor=executor
        )


@pytest.mark.parametrize(("n_workers", "per_worker"), [(2, 1), (1, 3)])
def test_a_killed_worker_costs_only_its_unfinished_trajectories(
    ray_cluster: Any, tmp_path: Path, n_workers: int, per_worker: int
) -> None:
    cfg = config(policy="killer")
    marker = tmp_path / "killed"
    marker.touch()  # the local reference run must not kill the test process
    run_eval(cfg, KillerPolicy(str(marker)), str(tmp_path / "local.jsonl"), progress=False)
    marker.unlink()
    summary = run_eval(
        cfg,
        KillerPolicy(str(marker)),
        str(tmp_path / "ray.jsonl"),
        progress=False,
        executor=RayExecutor(num_workers=n_workers, shards_per_worker=per_worker),
    )
    assert marker.exists(), "no worker was killed: the test proves nothing"
    assert summary.lost_workers == 1 and summary.workers == n_workers + 1
    shard = cfg.total() // (n_workers * per_worker)
    # the killed worker had streamed some records; only the rest of its shard ran again
    assert 0 < summary.rerun_episodes < shard
    assert summary.written == cfg.total() and summary.duplicates == 0
    keys = trajectory_keys(tmp_path / "ray.jsonl")
    assert len(keys) == len(set(keys)) == cfg.total()
    assert stable(tmp_path / "ray.jsonl") == stable(tmp_path / "local.jsonl")


def test_a_killed_driver_resumes_with_nothing_lost_or_doubled(
    ray_cluster: Any, tmp_path: Path
) -> None:
    tasks = [f"random-s4-p0.8-n{i}" for i in range(20)]
    cfg = config(policy="harness_toy:SlowRandomPolicy", tasks=tasks, samples=8)
    from harness_toy import SlowRandomPolicy

    run_eval(cfg, SlowRandomPolicy(0.0), str(tmp_path / "local.jsonl"), progress=False)
    out = tmp_path / "ray.jsonl"
    address = ray_cluster.get_runtime_context().gcs_address
    cmd = [
        sys.executable, "-m", "multiturn_envs.cli", "eval", ENV_ID,
        "--policy", "harness_toy:SlowRandomPolicy", "--tasks", ",".join(tasks),
        "--samples", "8", "--max-turns", "8", "--seed", "11", "--in-flight", "4",
        "--out", str(out), "--quiet",
        "--executor", "ray", "--ray-address", address, "--ray-workers", "2",
    ]  # fmt: skip
    driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and driver.poll() is None:
            if out.exists() and len(trajectory_keys(out)) >= 20:
                break
            time.sleep(0.05)
        assert driver.poll() is None, f"driver ended early: {driver.stderr.read().decode()[-2000:]}"
        before = len(trajectory_keys(out))
        driver.send_signal(signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    assert 20 <= before < cfg.total(), "the driver was not killed midway"
    summary = run_eval(
        cfg, SlowRandomPolicy(0.0), str(out), progress=False, executor=RayExecutor(num_workers=2)
    )
    assert summary.skipped >= before and summary.skipped + summary.written == cfg.total()
    keys = trajectory_keys(out)
    assert len(keys) == len(set(keys)) == cfg.total()
    assert stable(out) == stable(tmp_path / "local.jsonl")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ray-workers", "2"], "--ray-workers needs --executor ray"),
        (["--policy-placement", "actor-pool"], "--policy-placement needs --executor ray"),
        (["--executor", "ray", "--ray-workers", "0"], "--ray-workers must be >= 1"),
    ],
)
def test_cli_ray_flags_are_checked_in_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from multiturn_envs.cli import EXIT_USAGE, main

    out = tmp_path / "r.jsonl"
    code = main(["eval", ENV_ID, "--tasks", "1", "-k", "1", "--out", str(out), "-q", *argv])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("mode", ["continuation", "same-state"])
def test_cli_compare_on_ray_equals_the_local_comparison(
    mode: str, ray_cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from multiturn_envs.cli import main

    common = ["compare", ENV_ID, "--mode", mode, "--policy-a", "noisy-expert:0.3"]
    common += ["--policy-b", "random", "--tasks", "3", "-k", "2", "-t", "6", "--actions", "4"]
    results = []
    for extra in ([], ["--executor", "ray", "--ray-workers", "2"]):
        out = tmp_path / f"cmp{len(extra)}.json"
        assert main([*common, "--out", str(out), *extra]) == 0, capsys.readouterr().err
        results.append(json.loads(out.read_text()))
    assert results[0] == results[1]
    capsys.readouterr()


def test_an_llm_policy_on_the_actor_pool_is_prompted_as_in_the_worker(
    ray_cluster: Any, tiny_dir: Path, tmp_path: Path
) -> None:
    """The env's system prompt (and tools) travel with every request, so the tiny LLM on a Ray
    policy actor (no env there) writes the records it writes locally, token for token."""
    import functools

    from multiturn_envs.policies.prompting import Sampling
    from multiturn_envs.policies.transformers_backend import TransformersPolicy

    factory = functools.partial(
        TransformersPolicy.from_pretrained,
        str(tiny_dir),
        sampling=Sampling(max_tokens=6),
        name="tiny",
    )
    cfg = config(policy="tiny", tasks=TASKS[:2], samples=2, max_turns=3)
    run_eval(cfg, factory(), str(tmp_path / "local.jsonl"), progress=False)
    executor = RayExecutor(
        num_workers=1, policy_placement="actor-pool", policy_actors=1, policy_factory=factory
    )
    run_eval(cfg, factory(), str(tmp_path / "ray.jsonl"), progress=False, executor=executor)
    local = stable(tmp_path / "local.jsonl")
    assert stable(tmp_path / "ray.jsonl") == local
    first = next(iter(local.values()))["turn_tokens"][0]["prompt_delta_ids"]
    policy = factory()
    assert "You play FrozenLake" in policy.tokenizer.decode(first)  # the env's, not the default
