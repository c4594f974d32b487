"""Tokens per turn: every backend reports them, records carry them (schema 2, schema 1 still
reads), and a per-episode token limit ends an episode as the turn budget does, with its own
truncation reason."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.core import TURN_BUDGET
from multiturn_envs.episode import ENDS
from multiturn_envs.errors import PolicyError, RecordFileError
from multiturn_envs.harness import EvalConfig, read_run, run_eval
from multiturn_envs.harness.costs import episode_tokens, run_tokens
from multiturn_envs.harness.records import check_trajectory
from multiturn_envs.policies import CallablePolicy, Reply, TokenUsage, TurnRequest
from multiturn_envs.policies.baselines import RandomPolicy
from multiturn_envs.tools import ToolCall

DATA = Path(__file__).parent / "data"
ICE = {"is_slippery": False}
"""A lake that does not slip: the expert reaches the goal in 6 turns on 4x4."""


class MeteredExpert:
    """The expert, each reply costing ``prompt`` + ``completion`` tokens (a scripted policy
    that reports tokens as an LLM backend does)."""

    def __init__(self, prompt: int, completion: int, usage: Any = "counts") -> None:
        self.name = "metered-expert"
        self.usage = TokenUsage(prompt, completion) if usage == "counts" else usage

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        return [Reply(r.live_env().expert_action(), usage=self.usage) for r in requests]


def test_scripted_baselines_cost_no_tokens_and_records_say_so(tmp_path: Path) -> None:
    config = EvalConfig("MT/FrozenLake-v0", "random", ["4x4"], 3, 4, seed=1)
    run_eval(config, RandomPolicy(), str(tmp_path / "r.jsonl"), progress=False)
    for record in read_run(tmp_path / "r.jsonl").records:
        assert record["prompt_tokens"] == [0] * record["turns"]
        assert record["completion_tokens"] == [0] * record["turns"]


def test_a_policy_that_cannot_tell_leaves_the_counts_null(tmp_path: Path) -> None:
    config = EvalConfig("MT/FrozenLake-v0", "fn", ["4x4"], 1, 3)
    policy = CallablePolicy(lambda observation: "<answer>Left</answer>", name="fn")
    run_eval(config, policy, str(tmp_path / "r.jsonl"), progress=False)
    (record,) = read_run(tmp_path / "r.jsonl").records
    assert record["prompt_tokens"] is None and record["completion_tokens"] is None


def test_the_token_limit_ends_an_episode_like_the_turn_budget(tmp_path: Path) -> None:
    # 4x4 takes the expert 6 turns; 15 tokens a turn reach 40 at turn 3
    config = EvalConfig(
        "MT/FrozenLake-v0", "metered", ["4x4"], 2, 8, token_limit=40, env_kwargs=ICE
    )
    run_eval(config, MeteredExpert(10, 5), str(tmp_path / "r.jsonl"), progress=False)
    for record in read_run(tmp_path / "r.jsonl").records:
        assert record["turns"] == 3
        assert record["truncated"] and not record["terminated"] and not record["success"]
        assert record["truncation_reason"] == ENDS["token_limit"].name == "token_limit"
        assert record["prompt_tokens"] == [10, 10, 10]
        assert record["completion_tokens"] == [5, 5, 5]
    # a generous limit changes nothing: the expert succeeds, the turn budget is untouched
    roomy = EvalConfig(
        "MT/FrozenLake-v0", "metered", ["4x4"], 1, 8, token_limit=10_000, env_kwargs=ICE
    )
    run_eval(roomy, MeteredExpert(10, 5), str(tmp_path / "roomy.jsonl"), progress=False)
    (record,) = read_run(tmp_path / "roomy.jsonl").records
    assert record["success"] and record["truncation_reason"] is None
    tight = EvalConfig(
        "MT/FrozenLake-v0", "metered", ["4x4"], 1, 2, token_limit=10_000, env_kwargs=ICE
    )
    run_eval(tight, MeteredExpert(10, 5), str(tmp_path / "tight.jsonl"), progress=False)
    (record,) = read_run(tmp_path / "tight.jsonl").records
    assert record["truncation_reason"] == TURN_BUDGET and record["turns"] == 2


def test_success_at_the_limit_turn_is_a_success(tmp_path: Path) -> None:
    config = EvalConfig(
        "MT/FrozenLake-v0", "metered", ["4x4"], 1, 8, token_limit=6 * 15, env_kwargs=ICE
    )
    run_eval(config, MeteredExpert(10, 5), str(tmp_path / "r.jsonl"), progress=False)
    (record,) = read_run(tmp_path / "r.jsonl").records
    assert record["success"] and record["terminated"] and record["first_success_turn"] == 6
    assert record["truncation_reason"] is None


def test_a_token_limit_needs_a_policy_that_reports_tokens(tmp_path: Path) -> None:
    config = EvalConfig("MT/FrozenLake-v0", "fn", ["4x4"], 1, 3, token_limit=100)
    policy = CallablePolicy(lambda observation: "<answer>Left</answer>", name="fn")
    with pytest.raises(PolicyError, match="reported no tokens"):
        run_eval(config, policy, str(tmp_path / "r.jsonl"), progress=False)


@pytest.mark.parametrize("usage", [{"prompt_tokens": 1}, (1, 2), 3])
def test_a_usage_of_the_wrong_type_is_a_policy_error(tmp_path: Path, usage: Any) -> None:
    config = EvalConfig("MT/FrozenLake-v0", "bad", ["4x4"], 1, 3)
    with pytest.raises(PolicyError, match="TokenUsage"):
        run_eval(config, MeteredExpert(0, 0, usage=usage), str(tmp_path / "r.jsonl"))


@pytest.mark.parametrize("counts", [(-1, 0), (0, -5), (1.5, 2), (True, 1), ("3", 1)])
def test_token_counts_are_non_negative_ints(counts: tuple[Any, Any]) -> None:
    with pytest.raises(ValueError):
        TokenUsage(*counts)


@pytest.mark.parametrize("limit", [0, -3, 2.5, True, "100"])
def test_a_token_limit_is_a_positive_int(limit: Any) -> None:
    with pytest.raises(ValueError, match="token_limit"):
        EvalConfig("MT/FrozenLake-v0", "p", ["4x4"], 1, 3, token_limit=limit)


class MeteredMover:
    """A tool-calling policy: ``calls`` moves, then an answer without a call (which ends the
    episode); its calls cost 10 + 5 tokens, the stopping answer 12 + 1 (``calls`` 0: its
    first reply already stops)."""

    name = "metered-mover"

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        replies = []
        for request in requests:
            turn = sum(m["role"] == "assistant" for m in request.messages)
            if turn >= self.calls:
                replies.append(Reply("Done.", tool_calls=[], usage=TokenUsage(12, 1)))
                continue
            call = ToolCall("move", {"direction": "Right"})
            replies.append(Reply(call.text(), tool_calls=[call], usage=TokenUsage(10, 5)))
        return replies


@pytest.mark.parametrize("calls", [0, 2])
def test_the_reply_that_stops_an_episode_is_counted_apart(tmp_path: Path, calls: int) -> None:
    """A reply without a tool call ends the episode and is no turn, but it was paid for: the
    record keeps its tokens in ``stop_tokens``, and the report's sums include them (the inspect
    export's usage is the same ``episode_tokens``)."""
    config = EvalConfig("MT/FrozenLake-v0", "metered-mover", ["4x4"], 2, 8, env_kwargs=ICE)
    path = tmp_path / "r.jsonl"
    run_eval(config, MeteredMover(calls), str(path), progress=False)
    records = read_run(path).records
    for record in records:
        check_trajectory(record, "here")
        assert record["agent_stopped"] and record["turns"] == calls
        assert record["stop_tokens"] == [12, 1]
        assert record["prompt_tokens"] == ([10] * calls or None)
        assert episode_tokens(record) == (10 * calls + 12, 5 * calls + 1)
    tokens = run_tokens("metered-mover", records)
    assert (tokens.counted, tokens.prompt, tokens.completion) == (
        2,
        2 * (10 * calls + 12),
        2 * (5 * calls + 1),
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("stop_tokens", [1], "not \\[prompt, completion\\]"),
        ("stop_tokens", [1, -1], "not \\[prompt, completion\\]"),
        ("stop_tokens", [1, True], "not \\[prompt, completion\\]"),
        ("stop_tokens", {"prompt": 1}, "a list or null"),
        ("prompt_tokens", [1], "2 actions but 1 prompt_tokens"),
        ("completion_tokens", [1, -2], "no token count"),
        ("prompt_tokens", [1, True], "no token count"),
        ("prompt_tokens", [1, 2.5], "no token count"),
        ("completion_tokens", "12", "a list or null"),
    ],
)
def test_a_record_with_bad_counts_is_refused(field: str, value: Any, message: str) -> None:
    record = {"task_id": "t", "sample": 0, "max_turns": 2, "actions": ["a", "b"]}
    record["rewards"] = [0.0, 0.0]
    with pytest.raises(RecordFileError, match=message):
        check_trajectory({**record, field: value}, "here")
    check_trajectory({**record, field: None}, "here")


def test_a_schema_1_file_reads_and_is_not_appended_to(tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    shutil.copy(DATA / "v1_random_error_after.jsonl", old)
    run = read_run(old)
    assert run.header["schema"] == 1
    assert all("prompt_tokens" not in r for r in run.records)
    before = old.read_bytes()
    header = run.config
    config = EvalConfig(
        header["env_id"],
        header["policy"],
        header["tasks"],
        header["samples"],
        header["max_turns"],
        error_after=header["error_after"],
        seed=header["seed"],
    )
    with pytest.raises(RecordFileError, match=r"schema 1.*still reads"):
        run_eval(config, RandomPolicy(), str(old), progress=False)
    assert old.read_bytes() == before


def test_a_record_line_keeps_the_counts_as_json_ints(tmp_path: Path) -> None:
    config = EvalConfig("MT/FrozenLake-v0", "metered", ["4x4"], 1, 2)
    run_eval(config, MeteredExpert(7, 3), str(tmp_path / "r.jsonl"), progress=False)
    line = (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()[1]
    assert '"prompt_tokens":[7,7]' in line and '"completion_tokens":[3,3]' in line
    assert json.loads(line)["schema"] == 2
