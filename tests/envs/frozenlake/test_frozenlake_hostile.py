"""FrozenLake-text under a hostile agent: any reply is read in time linear in its length.

Each test names the limit of ``docs/security.md`` it checks; wall-clock bounds are generous
(``"\\n" * 40000`` took 50 s before the label regex stopped scanning across newlines).
"""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv
from multiturn_envs.envs.frozenlake.parsing import final_answer, parse_move

FAST = 5.0  # seconds: a generous bound for replies that now take milliseconds
DEGENERATE = ["\n", " ", "```", "`", "<answer>", "</think>", "<action>", "Answer:", "answer",
              "final ", "*", "#", "> ", "-", "Left", "up ", "\r\n", "\t", "x"]  # fmt: skip


def test_forty_thousand_newlines_are_read_at_once() -> None:
    """Limit: linear-time parsing (the label-line regex re-scanned runs of blank lines)."""
    start = time.perf_counter()
    assert parse_move("\n" * 40_000).action is None
    assert parse_move("\n" * 40_000 + "Action: Down\n" + "\n" * 40_000).action is not None
    assert time.perf_counter() - start < FAST


def test_label_lines_read_as_before_around_blank_lines() -> None:
    """The linear label regex finds the same answers as the old one (``\\s`` in its prefix)."""
    old = re.compile(
        r"^[\s*_#>-]*(?:final\s+)?(?:action|answer|move)[\s*_]*[:=](.*)$",
        re.IGNORECASE | re.MULTILINE,
    )
    for text in (
        "\n\n  > **Answer**: Right",
        "think\n\n\nFinal answer = up\n",
        "* \n - action:left\nmove: down",
        "Answer\n\n: Right",
    ):
        labelled = old.findall(text)
        assert final_answer(text) == (labelled[-1] if labelled else text)


@settings(max_examples=40, deadline=None)
@given(
    piece=st.sampled_from(DEGENERATE),
    other=st.sampled_from(["", "Right", "<answer>", "\n", "```"]),
    count=st.integers(1, 100_000),
)
def test_degenerate_replies_answer_within_the_contract(piece: str, other: str, count: int) -> None:
    """Limit: reply parsing is linear (core's 1,000,000-character cap first); one token
    repeated up to 100,000 times is a turn, answered at once."""
    env = FrozenLakeTextEnv(max_turns=None)
    env.reset(seed=0)
    start = time.perf_counter()
    obs, _, _, _, info = env.step(other + piece * count + other)
    assert time.perf_counter() - start < FAST
    assert obs and info["turn"] == 1


def test_an_over_long_reply_is_refused_as_a_move_that_is_not_made() -> None:
    """Limit: core's max_action_chars (1,000,000): the turn is spent in place, with the env's
    own parse-error info (event, cell), and the oracle scores it as the no-op it is."""
    env = FrozenLakeTextEnv(max_turns=5)
    env.reset(seed=0)
    reply = "Right " * 200_000
    noop = env.score_action("I cannot decide")
    assert env.score_action(reply) == noop
    obs, _, terminated, _, info = env.step(reply)
    assert "characters long" in obs and "You did not move" in obs
    assert info["parse_error"] and info["event"] == "parse_error" and not terminated
    assert info["step_score"] == noop
