"""Reading moves out of LLM replies: the rule table of the env card, and no input ever raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.frozenlake.dynamics import DOWN, LEFT, RIGHT, UP
from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv
from multiturn_envs.envs.frozenlake.parsing import final_answer, parse_move

READS = [
    ("Left", LEFT),
    ("  down.\n", DOWN),
    ("RIGHT!", RIGHT),
    ("U", UP),
    ("r", RIGHT),
    ("North", UP),
    ("west", LEFT),
    ("I will move right.", RIGHT),
    ("Moving down seems safest here", DOWN),
    ("<answer>Up</answer>", UP),
    ("<ANSWER> left </ANSWER>", LEFT),
    ("<answer>D</answer>", DOWN),
    ("<think>Left is a hole, up is a wall.</think><answer>Right</answer>", RIGHT),
    ("Left is a hole, so not that.</think> Down", DOWN),
    ("Going left or up is bad. <answer>Down</answer>", DOWN),
    ("<answer>Left</answer> then later <answer>Down</answer>", DOWN),
    ("I think so. <answer>Right", RIGHT),
    ("<action>up</action>", UP),
    ("Thinking about left and right...\n```\ndown\n```", DOWN),
    ("```text\nLeft\n```", LEFT),
    ("```left``` no wait ```right```", RIGHT),
    ("Up would bump the wall, left too.\nAction: Down", DOWN),
    ("**Final Answer:** Right", RIGHT),
    ("move: up", UP),
    ("Up || Up", UP),
    ("Down. Down. DOWN.", DOWN),
]

ERRORS = [
    ("", "Could not find"),
    ("   ", "Could not find"),
    ("I am not sure.", "Could not find"),
    ("Left || Up", "more than one move"),
    ("left or right", "more than one move"),
    ("<answer></answer> right", "Could not find"),
    ("<answer>Up, then Right</answer>", "more than one move"),
    ("upward", "Could not find"),
    ("5", "Could not find"),
    ("Action: jump", "Could not find"),
    ("```python\nprint(1)\n``` Left", "Could not find"),
]


@pytest.mark.parametrize(("reply", "move"), READS)
def test_reads(reply: str, move: int) -> None:
    assert parse_move(reply).action == move and parse_move(reply).error is None


@pytest.mark.parametrize(("reply", "message"), ERRORS)
def test_parse_errors_say_why(reply: str, message: str) -> None:
    parsed = parse_move(reply)
    assert parsed.action is None and message in (parsed.error or "")
    assert "Left, Down, Right or Up" in (parsed.error or "")


def test_final_answer_priority() -> None:
    reply = "```left```\nAction: up\n<action>down</action>\n<answer>right</answer>"
    assert final_answer(reply) == "right"
    assert final_answer(reply.replace("<answer>right</answer>", "")).strip() == "down"


@settings(max_examples=200)
@given(st.text(max_size=300))
def test_any_text_parses_without_raising(text: str) -> None:
    parsed = parse_move(text)
    assert (parsed.action is None) != (parsed.error is None)
    assert parsed.action in (None, LEFT, DOWN, RIGHT, UP)


@settings(max_examples=100)
@given(st.lists(st.text(max_size=80) | st.sampled_from(["<answer>", "```", "</think>"])))
def test_any_reply_steps_without_raising(pieces: list[str]) -> None:
    env = FrozenLakeTextEnv(max_turns=3)
    env.reset(seed=0, options={"task_id": "4x4"})
    obs, _, _, _, info = env.step("".join(pieces))
    assert isinstance(obs, str) and obs and 0.0 <= info["step_score"] <= 1.0
    assert info["parse_error"] == (info["event"] == "parse_error")
