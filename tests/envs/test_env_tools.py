"""Every env's typed tools: a tool call is the same action as its text form (same observation,
reward, info and oracle score), a malformed call is a turn with a clear message, and the
declarations are what the env cards show (docs/envs/*.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import multiturn_envs
from multiturn_envs.envs.bfcl.calls import decode
from multiturn_envs.envs.bfcl.env import BFCLEnv
from multiturn_envs.envs.deepcoder.env import DeepCoderEnv
from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv
from multiturn_envs.envs.intercode_sql.env import InterCodeSQLEnv
from multiturn_envs.tools import ToolCall, tool_call_text

CARDS = Path(__file__).resolve().parents[2] / "docs" / "envs"
MOVES = ("Left", "Down", "Right", "Up")


def _same_step(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    assert a[0] == b[0] and a[1:4] == b[1:4]
    assert a[4] == b[4]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    moves=st.lists(st.sampled_from(MOVES), min_size=1, max_size=8),
    slippery=st.booleans(),
)
def test_frozenlake_move_call_is_the_text_move(seed: int, moves: list[str], slippery: bool) -> None:
    text = FrozenLakeTextEnv(max_turns=8, is_slippery=slippery)
    tool = FrozenLakeTextEnv(max_turns=8, is_slippery=slippery)
    for env in (text, tool):
        env.reset(seed=seed, options={"task_id": "4x4"})
    for move in moves:
        if text.done:
            break
        call = ToolCall("move", {"direction": move})
        assert tool.score_action(call.text()) == text.score_action(move)
        assert tool.as_tool_call(move) == call
        _same_step(text.step(move), tool.step(call))
    calls = [m["content"] for m in tool.messages() if m["role"] == "assistant"]
    assert all(c.startswith("<tool_call>") for c in calls)  # the history holds the calls


def test_frozenlake_bad_calls_are_turns_with_a_message() -> None:
    env = FrozenLakeTextEnv(max_turns=5)
    env.reset(seed=0, options={"task_id": "4x4"})
    bad = '<tool_call>{"name": "move", "arguments": {"direction": "Sideways"}}</tool_call>'
    obs, reward, terminated, truncated, info = env.step(bad)
    assert "must be one of" in obs and "Left" in obs and info["parse_error"]
    assert (reward, terminated, truncated, env.turn) == (0.0, False, False, 1)
    two = tool_call_text([ToolCall("move", {"direction": "Up"})] * 2)
    assert "one call" in env.step(two)[0]
    # the text forms still work, and text that merely mentions a tool call is text
    assert not env.step("Left")[4]["parse_error"]
    assert not env.step("I will go <tool_call> Up")[4]["parse_error"]


def test_sql_calls_are_the_text_actions(tmp_path: Path) -> None:
    text, tool = InterCodeSQLEnv(max_turns=6), InterCodeSQLEnv(max_turns=6)
    task = text.task_ids()[0]
    for env in (text, tool):
        env.reset(seed=0, options={"task_id": task})
    query = "SELECT count(*) FROM sqlite_master"
    _same_step(text.step(query), tool.step(ToolCall("execute_sql", {"query": query})))
    gold = text.task().gold
    run_and_submit = [ToolCall("execute_sql", {"query": gold}), ToolCall("submit", {})]
    assert tool.as_tool_call(gold) == run_and_submit[0]
    expected = text.step(f"{gold}\nsubmit")
    got = tool.step(run_and_submit)
    _same_step(expected, got)
    assert got[2] and got[4]["success"]
    env = InterCodeSQLEnv(max_turns=6)
    env.reset(seed=0, options={"task_id": task})
    wrong = tool_call_text([ToolCall("submit", {}), ToolCall("execute_sql", {"query": gold})])
    obs, _, terminated, _, info = env.step(wrong)
    assert "execute_sql then submit" in obs and info["parse_error"] and not terminated
    obs, *_, info = env.step(ToolCall("execute_sql", {"query": "  "}))
    assert "empty" in obs and info["parse_error"]
    obs, *_, info = env.step('<tool_call>{"name": "execute_sql", "arguments": {}}</tool_call>')
    assert '"query"' in obs and info["parse_error"]
    for made in (text, tool, env):
        made.close()


def test_deepcoder_submit_program_is_a_submission() -> None:
    text = DeepCoderEnv(backend="local", max_turns=3)
    tool = DeepCoderEnv(backend="local", max_turns=3)
    try:
        task = text.task_ids()[0]
        for env in (text, tool):
            env.reset(seed=0, options={"task_id": task})
        expert = text.expert_action()
        call = tool.as_tool_call(expert)
        assert call is not None and call.name == "submit_program"
        assert "```" not in call.arguments["code"]
        expected, got = text.step(expert), tool.step(call)
        assert expected[0] == got[0] and got[4]["success"] and got[2]
        tool.reset(seed=0, options={"task_id": task})
        obs, *_, info = tool.step('<tool_call>{"name": "submit_program"}</tool_call>')
        assert '"code"' in obs and info["parse_error"] and tool.turn == 1
    finally:
        text.close()
        tool.close()


def _bfcl_calls(reply: str) -> list[ToolCall]:
    return [ToolCall(c.name, {**c.kwargs}) for c in decode(reply).calls]


@pytest.mark.parametrize("category", ["multi_turn_base", "simple_python"])
def test_bfcl_expert_as_tool_calls_matches_the_text_expert(category: str) -> None:
    text = BFCLEnv(category=category, source="bundled", max_turns=20)
    tool = BFCLEnv(category=category, source="bundled", max_turns=20)
    task = text.task_ids()[0]
    for env in (text, tool):
        env.reset(seed=0, options={"task_id": task})
    names = {t.name for t in tool.tools()}
    assert names and all(t.parameters["type"] == "object" for t in tool.tools())
    while not text.done:
        reply = text.expert_action()
        calls = _bfcl_calls(reply)
        assert {c.name for c in calls} <= names | {c.name for c in calls}
        action: Any = calls if calls else reply  # a turn-ending message stays text
        _same_step(text.step(reply), tool.step(action))
        names = {t.name for t in tool.tools()}
    assert tool.done and tool.current_info()["success"]


def test_bfcl_reads_calls_loosely_and_grades_them_itself() -> None:
    env = BFCLEnv(category="multi_turn_base", source="bundled", max_turns=20)
    env.reset(seed=0, options={"task_id": env.task_ids()[0]})
    assert env.reply_without_call == "action" and env.max_tool_calls > 1
    obs, *_, info = env.step(ToolCall("no_such_function", {"x": 1}))
    assert "not given" in (info["error_message"] or "") or "no_such_function" in obs
    assert BFCLEnv(category="simple_python", source="bundled").tools() == ()  # before reset


def _card_tools(card: str) -> list[dict[str, Any]]:
    text = (CARDS / card).read_text(encoding="utf-8")
    section = text.split("## Tools", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None, f"{card}: the Tools section has no json block"
    return list(json.loads(block.group(1)))


@pytest.mark.parametrize(
    ("card", "env_cls"),
    [
        ("frozenlake.md", FrozenLakeTextEnv),
        ("intercode-sql.md", InterCodeSQLEnv),
        ("deepcoder.md", DeepCoderEnv),
    ],
)
def test_env_cards_show_the_env_tools(card: str, env_cls: type) -> None:
    kwargs = {"backend": "local"} if env_cls is DeepCoderEnv else {}
    env = env_cls(**kwargs)
    try:
        env.reset(seed=0)
        assert _card_tools(card) == [t.openai() for t in env.tools()]
    finally:
        env.close()


def test_terminal_card_shows_its_tools() -> None:
    from multiturn_envs.envs.terminal.env import TOOLS

    assert _card_tools("terminal.md") == [t.openai() for t in TOOLS]


def test_bfcl_card_shows_a_task_tool_schema() -> None:
    env = BFCLEnv(category="multi_turn_base", source="bundled")
    env.reset(seed=0, options={"task_id": env.task_ids()[0]})
    shown = _card_tools("bfcl.md")
    tools = {t.name: t.openai() for t in env.tools()}
    assert shown and all(tools.get(s["function"]["name"]) == s for s in shown)


def test_every_registered_env_declares_tools() -> None:
    for env_id in multiturn_envs.env_ids():
        spec = gym.spec(env_id)
        entry = spec.entry_point
        assert isinstance(entry, str)
        module, _, name = entry.partition(":")
        cls = getattr(__import__(module, fromlist=[name]), name)
        assert cls.tools is not multiturn_envs.TextEnv.tools, f"{env_id} declares no tools"


def test_text_env_without_tools_reads_calls_as_text() -> None:
    from multiturn_envs.testing import GuessEnv

    env = GuessEnv(max_turns=3)
    env.reset(seed=0)
    assert env.read_tool_calls('<tool_call>{"name": "guess"}</tool_call>') is None
    assert env.step(ToolCall("guess", {"n": 3}))[4]["parse_error"]  # its parser says no
    assert np.isfinite(env.score_action("guess 3"))
