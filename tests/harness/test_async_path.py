"""The harness's async path: an async policy's turn and the envs' steps share one event loop;
envs that wait on I/O step concurrently in worker threads, and the records are the sync
path's records."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import harness_toy  # noqa: F401  (registers MTToy/Line-v0)
from harness_toy import LineEnv

from multiturn_envs.harness import EvalConfig, read_run, record_key, run_eval
from multiturn_envs.policies.base import PolicyCaller, Reply, TurnRequest


class SlowLine(LineEnv):
    """LineEnv whose steps wait 0.3 s on "I/O" (a stand-in for a sandbox run)."""

    blocking_io = True

    def _step(self, action: str) -> Any:
        time.sleep(0.3)
        return super()._step(action)


class Words:
    """right, right, stay, ... from the turn seed: never reads the env."""

    name = "words"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        return [Reply(text=("right", "right", "stay")[r.seed % 3]) for r in requests]


class AsyncWords:
    """The same replies through ``aact`` (an async backend, as the HTTP one)."""

    name = "words"

    async def aact(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        return Words().act(requests)


def _records(path: Path) -> dict[Any, dict[str, Any]]:
    out = {}
    for record in read_run(path).records:
        record = dict(record)
        record.pop("timings")
        out[record_key(record)] = record
    return out


def test_async_path_steps_io_bound_envs_concurrently_with_the_sync_records(
    tmp_path: Path,
) -> None:
    config = EvalConfig(
        "MTToy/Line-v0", "words", tasks=["line-2", "line-3"], samples=4, max_turns=3
    )
    t0 = time.perf_counter()
    policy = AsyncWords()
    assert PolicyCaller(policy).is_async
    run_eval(config, policy, str(tmp_path / "a.jsonl"), in_flight=8, make_env=SlowLine)
    async_s = time.perf_counter() - t0
    run_eval(config, Words(), str(tmp_path / "s.jsonl"), in_flight=8, make_env=SlowLine)
    assert _records(tmp_path / "a.jsonl") == _records(tmp_path / "s.jsonl")
    steps = sum(r["turns"] for r in read_run(tmp_path / "a.jsonl").records)
    # 8 episodes in flight: each tick's 0.3 s steps overlap (sequential: steps x 0.3 s)
    assert steps >= 16 and async_s < 0.6 * steps * 0.3
