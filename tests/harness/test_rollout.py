"""The runner: determinism, one batched call per tick, seeds, async policies, clean-up."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from harness_toy import ENV_ID, LineEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.harness import EvalConfig, episode_seeds, read_run, run_eval
from multiturn_envs.policies.base import Reply, TurnRequest
from multiturn_envs.policies.baselines import ExpertPolicy, RandomPolicy

TASKS = ["line-1", "line-2", "line-4", "line-6"]


def config(**kw: Any) -> EvalConfig:
    base: dict[str, Any] = {
        "env_id": ENV_ID,
        "policy": "random",
        "tasks": TASKS,
        "samples": 5,
        "max_turns": 6,
    }
    base.update(kw)
    return EvalConfig(**base)


def stable(path: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """The records keyed by (task, sample, T), without the wall-clock timings."""
    out = {}
    for rec in read_run(path).records:
        rec = dict(rec)
        rec.pop("timings")
        out[(rec["task_id"], rec["sample"], rec["max_turns"])] = rec
    return out


class RecordingPolicy:
    """Wraps a policy and remembers every batch it was handed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.batches: list[list[TurnRequest]] = []
        self.saw_live_messages: list[bool] = []

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        self.batches.append(list(requests))
        self.saw_live_messages.extend(req.messages == req.env.messages() for req in requests)
        return self.inner.act(requests)


def test_same_seed_same_records_whatever_the_schedule(tmp_path: Path) -> None:
    cfg = config(seed=7)
    run_eval(cfg, RandomPolicy(), str(tmp_path / "a.jsonl"), in_flight=64)
    run_eval(cfg, RandomPolicy(), str(tmp_path / "b.jsonl"), in_flight=3)
    run_eval(cfg, RandomPolicy(), str(tmp_path / "c.jsonl"), in_flight=5, workers=3)
    a, b, c = (stable(tmp_path / f"{x}.jsonl") for x in "abc")
    assert len(a) == 4 * 5
    assert a == b == c
    run_eval(config(seed=8), RandomPolicy(), str(tmp_path / "d.jsonl"))
    d = stable(tmp_path / "d.jsonl")
    assert [r["actions"] for r in a.values()] != [d[k]["actions"] for k in a]


def test_one_batched_call_per_tick_over_all_live_episodes(tmp_path: Path) -> None:
    policy = RecordingPolicy(RandomPolicy())
    summary = run_eval(config(), policy, str(tmp_path / "r.jsonl"), in_flight=64)
    records = read_run(tmp_path / "r.jsonl").records
    longest = max(r["turns"] for r in records)
    # everything fits in flight, so tick t holds exactly the episodes that have a turn t
    assert summary.policy_calls == len(policy.batches) == longest
    for t, batch in enumerate(policy.batches, start=1):
        assert len(batch) == sum(1 for r in records if r["turns"] >= t)
    assert sum(len(b) for b in policy.batches) == sum(r["turns"] for r in records)
    assert summary.steps == sum(r["turns"] for r in records)


def test_batch_is_bounded_by_in_flight_and_refilled(tmp_path: Path) -> None:
    policy = RecordingPolicy(RandomPolicy())
    run_eval(config(), policy, str(tmp_path / "r.jsonl"), in_flight=3)
    sizes = [len(b) for b in policy.batches]
    assert max(sizes) == 3
    # the batch stays full while episodes are pending, then only drains
    first_short = next(i for i, n in enumerate(sizes) if n < 3)
    assert all(n == 3 for n in sizes[:first_short])
    assert all(a >= b for a, b in zip(sizes[first_short:], sizes[first_short + 1 :]))
    ids = [req.episode_id for batch in policy.batches for req in batch]
    for batch in policy.batches:
        assert len({r.episode_id for r in batch}) == len(batch)
    assert len(set(ids)) == 4 * 5


def test_policy_sees_the_conversation_and_unique_seeds(tmp_path: Path) -> None:
    policy = RecordingPolicy(RandomPolicy())
    run_eval(config(budget_mode="hidden"), policy, str(tmp_path / "r.jsonl"))
    seeds = [req.seed for batch in policy.batches for req in batch]
    assert len(set(seeds)) == len(seeds)
    assert policy.saw_live_messages and all(policy.saw_live_messages)
    for batch in policy.batches:
        for req in batch:
            assert req.messages[0]["role"] == "user"
            assert len(req.messages) % 2 == 1
            assert "Turns left" not in req.observation  # hidden budget never leaks T


def test_episode_seeds_depend_on_task_id_not_position() -> None:
    a = episode_seeds(3, "line-4", 2, 0, 6)
    assert a == episode_seeds(3, "line-4", 2, 0, 6)
    assert a[1][:3] == episode_seeds(3, "line-4", 2, 0, 3)[1]  # prefix-stable in n_turns
    assert a[0] != episode_seeds(3, "line-4", 3, 0, 6)[0]
    assert a[0] != episode_seeds(4, "line-4", 2, 0, 6)[0]
    assert a[0] != episode_seeds(3, "line-5", 2, 0, 6)[0]
    tasks_a = stable_first_actions(["line-2", "line-4"])
    tasks_b = stable_first_actions(["line-4", "line-2"])
    assert tasks_a == tasks_b


def stable_first_actions(tasks: list[str]) -> dict[str, list[str]]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.jsonl"
        run_eval(config(tasks=tasks, samples=3), RandomPolicy(), str(out))
        return {f"{r['task_id']}/{r['sample']}": r["actions"] for r in read_run(out).records}


def test_expert_on_a_slipless_line_succeeds_at_the_goal_distance(tmp_path: Path) -> None:
    cfg = config(env_kwargs={"slip": 0.0}, policy="expert", samples=2)
    run_eval(cfg, ExpertPolicy(), str(tmp_path / "r.jsonl"))
    for rec in read_run(tmp_path / "r.jsonl").records:
        goal = int(rec["task_id"].split("-")[1])
        assert rec["first_success_turn"] == goal
        assert rec["success"] and rec["terminated"] and not rec["truncated"]
        assert rec["rewards"][-1] == 1.0 and rec["step_scores"] == [1.0] * goal


class AsyncRandom:
    """An async policy (as an HTTP backend would be) that defers to the random baseline."""

    name = "random"

    def __init__(self) -> None:
        self.calls = 0

    async def aact(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        self.calls += 1
        await asyncio.sleep(0)
        return RandomPolicy().act(requests)


def test_async_policy_gives_the_same_records(tmp_path: Path) -> None:
    run_eval(config(), RandomPolicy(), str(tmp_path / "sync.jsonl"))
    policy = AsyncRandom()
    summary = run_eval(config(), policy, str(tmp_path / "async.jsonl"), workers=2)
    assert policy.calls == summary.policy_calls > 0
    assert stable(tmp_path / "sync.jsonl") == stable(tmp_path / "async.jsonl")


def test_announced_mode_runs_every_budget_of_the_grid(tmp_path: Path) -> None:
    policy = RecordingPolicy(RandomPolicy())
    cfg = config(budget_mode="announced", turn_grid=[2, 4], samples=3)
    run_eval(cfg, policy, str(tmp_path / "r.jsonl"))
    records = read_run(tmp_path / "r.jsonl").records
    assert sorted({r["max_turns"] for r in records}) == [2, 4]
    assert len(records) == 2 * 4 * 3
    assert all(r["turns"] <= r["max_turns"] and r["budget_mode"] == "announced" for r in records)
    assert all("Turns left" in req.observation for b in policy.batches for req in b)


def test_error_injection_is_recorded(tmp_path: Path) -> None:
    cfg = config(error_after=1, env_kwargs={"slip": 0.0}, tasks=["line-4", "line-6"])
    run_eval(cfg, ExpertPolicy(), str(tmp_path / "r.jsonl"))
    for rec in read_run(tmp_path / "r.jsonl").records:
        inj = rec["error_injection"]
        assert inj["after_expert_steps"] == 1
        assert inj["injected_actions"] == ["right", inj["error_action"]]
        assert inj["prefix_turns"] == 2
        # one step right, one step back: the expert needs the full distance again
        assert rec["first_success_turn"] == int(rec["task_id"].split("-")[1])


class Boom(Exception):
    pass


class FailingPolicy:
    name = "random"

    def __init__(self, after: int, exc: type[BaseException]) -> None:
        self.after, self.exc, self.calls = after, exc, 0

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        self.calls += 1
        if self.calls > self.after:
            raise self.exc("policy failed")
        return RandomPolicy().act(requests)


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_envs_are_closed_when_the_policy_fails(tmp_path: Path, exc: type[BaseException]) -> None:
    made: list[LineEnv] = []

    def make() -> gym.Env[str, str]:
        env = gym.make(ENV_ID)
        made.append(env.unwrapped)  # type: ignore[arg-type]
        return env

    with pytest.raises(exc):
        run_eval(
            config(), FailingPolicy(3, exc), str(tmp_path / "r.jsonl"), in_flight=4, make_env=make
        )
    assert len(made) == 4
    assert all(getattr(env, "_closed", False) for env in made)
    done = read_run(tmp_path / "r.jsonl").records  # whatever finished is on disk
    assert all(r["turns"] <= 3 for r in done)


def test_a_wrong_number_of_replies_is_a_clear_error(tmp_path: Path) -> None:
    class Short:
        name = "short"

        def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
            return [Reply("left")]

    with pytest.raises(RuntimeError, match="returned 1 replies for"):
        run_eval(config(), Short(), str(tmp_path / "r.jsonl"))


@settings(max_examples=15)
@given(
    samples=st.integers(1, 4),
    max_turns=st.integers(1, 7),
    in_flight=st.integers(1, 9),
    seed=st.integers(0, 2**32),
)
def test_records_are_complete_and_consistent(
    tmp_path_factory: pytest.TempPathFactory,
    samples: int,
    max_turns: int,
    in_flight: int,
    seed: int,
) -> None:
    out = tmp_path_factory.mktemp("prop") / "r.jsonl"
    cfg = config(samples=samples, max_turns=max_turns, seed=seed)
    summary = run_eval(cfg, RandomPolicy(), str(out), in_flight=in_flight)
    records = read_run(out).records
    assert summary.written == len(records) == len(TASKS) * samples
    for rec in records:
        n = rec["turns"]
        assert 1 <= n <= max_turns
        assert len(rec["actions"]) == len(rec["rewards"]) == len(rec["step_scores"]) == n
        assert len(rec["parse_errors"]) == len(rec["timings"]["env_step_s"]) == n
        assert rec["terminated"] != rec["truncated"]
        if rec["truncated"]:
            assert n == max_turns and rec["first_success_turn"] is None
        else:
            assert rec["first_success_turn"] == n and rec["success"]


def test_a_run_in_memory_gives_the_records_its_file_would(tmp_path: Path) -> None:
    """``out=None`` (and ``eval_records``) keep the records in memory, equal to the file's."""
    from multiturn_envs.harness import eval_records

    cfg = config(seed=3)
    summary = run_eval(cfg, RandomPolicy(), tmp_path / "r.jsonl", progress=False)
    assert summary.records is None
    on_disk = read_run(tmp_path / "r.jsonl").records
    in_memory = run_eval(cfg, RandomPolicy(), progress=False, in_flight=3)
    assert in_memory.path == "<memory>" and in_memory.written == len(on_disk) == cfg.total()
    assert list(tmp_path.iterdir()) == [tmp_path / "r.jsonl"]

    def key(rec: Any) -> tuple[str, int, int]:
        return (rec["task_id"], rec["sample"], rec["max_turns"])

    def without_timings(records: Any) -> dict[tuple[str, int, int], dict[str, Any]]:
        return {key(r): {k: v for k, v in r.items() if k != "timings"} for r in records}

    assert in_memory.records is not None
    assert without_timings(in_memory.records) == without_timings(on_disk)
    assert without_timings(eval_records(cfg, RandomPolicy(), progress=False)) == (
        without_timings(on_disk)
    )


def test_run_eval_names_an_unknown_run_option(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="in_fligth"):
        run_eval(config(), RandomPolicy(), tmp_path / "r.jsonl", in_fligth=2)
    assert not (tmp_path / "r.jsonl").exists()
