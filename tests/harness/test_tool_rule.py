"""The harness with tool-calling policies: calls are recorded as the actions, a reply without a
call ends the episode where the env says so (the rule training follows: TRL ends a rollout
there), and requests carry the env's system prompt and tools."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from multiturn_envs.harness import (
    EvalConfig,
    env_factory_of,
    read_run,
    replay_trajectories,
    run_eval,
)
from multiturn_envs.harness.records import check_trajectory
from multiturn_envs.policies.base import Reply, TurnRequest
from multiturn_envs.tools import ToolCall


class ScriptedToolPolicy:
    """Calls ``move`` ``calls`` times (Right, Down, ...), then answers "Done." without a call."""

    name = "scripted-tools"

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.seen: list[TurnRequest] = []

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        replies = []
        for request in requests:
            self.seen.append(request)
            turn = sum(m["role"] == "assistant" for m in request.messages)
            if turn >= self.calls:
                replies.append(Reply(text="Done.", tool_calls=[]))
                continue
            call = ToolCall("move", {"direction": ("Right", "Down")[turn % 2]})
            replies.append(Reply(text=call.text(), tool_calls=[call]))
        return replies


def test_calls_are_the_actions_and_no_call_ends_the_episode(tmp_path: Path) -> None:
    config = EvalConfig(
        "MT/FrozenLake-v0",
        "scripted-tools",
        tasks=["map:SFFF/FFFF/FFFF/FFFG"],
        samples=2,
        max_turns=8,
        env_kwargs={"is_slippery": False},
    )
    policy = ScriptedToolPolicy(calls=2)
    run_eval(config, policy, str(tmp_path / "r.jsonl"), progress=False)
    run = read_run(tmp_path / "r.jsonl")
    for record in run.records:
        check_trajectory(record, "r")
        assert record["turns"] == 2 and record["agent_stopped"]
        assert not record["terminated"] and not record["truncated"] and not record["success"]
        assert all(a.startswith("<tool_call>") for a in record["actions"])
        assert record["parse_errors"] == [False, False]
    # the records replay (the calls are actions like any other)
    texts = replay_trajectories(env_factory_of(run), run.records)
    assert [len(t.action_index) for t in texts] == [2, 2]
    # every request carried the env's system prompt and tools
    assert all(r.system_prompt and [t.name for t in r.tools] == ["move"] for r in policy.seen)


def test_a_text_mode_done_is_still_a_turn(tmp_path: Path) -> None:
    class Done:
        name = "done"

        def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
            return [Reply(text="Done.") for _ in requests]

    config = EvalConfig("MT/FrozenLake-v0", "done", tasks=["4x4"], samples=1, max_turns=3)
    run_eval(config, Done(), str(tmp_path / "r.jsonl"), progress=False)
    (record,) = read_run(tmp_path / "r.jsonl").records
    assert record["turns"] == 3 and record["truncated"] and not record["agent_stopped"]
    assert record["parse_errors"] == [True, True, True]


def test_bfcl_takes_a_reply_without_call_as_its_message(tmp_path: Path) -> None:
    """BFCL says reply_without_call="action": the message ends the user turn, not the episode."""

    class Talk:
        name = "talk"

        def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
            return [Reply(text="I cannot help.", tool_calls=[]) for _ in requests]

    config = EvalConfig(
        "MT/BFCL-v0",
        "talk",
        tasks=[_first_bfcl_task()],
        samples=1,
        max_turns=2,
        env_kwargs={"category": "multi_turn_base", "source": "bundled"},
    )
    run_eval(config, Talk(), str(tmp_path / "r.jsonl"), progress=False)
    (record,) = read_run(tmp_path / "r.jsonl").records
    assert record["turns"] >= 1 and not record["agent_stopped"]
    assert record["actions"][0] == "I cannot help."


def _first_bfcl_task() -> str:
    from multiturn_envs.envs.bfcl.env import BFCLEnv

    return str(BFCLEnv(category="multi_turn_base", source="bundled").task_ids()[0])
