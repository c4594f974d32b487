"""DeepCoder-MT's reply parsing under degenerate replies (its sandbox has its own suite).

Limit checked: the program is read from a reply in time linear in the reply (``<think>`` blocks
are found with str.find; 20,000 unclosed ``<think>`` tags took 22 s with the old regex).
"""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.deepcoder.env import extract_program

FAST = 5.0


def test_unclosed_think_tags_are_read_at_once() -> None:
    start = time.perf_counter()
    assert extract_program("<think>" * 100_000) == "<think>" * 100_000
    assert time.perf_counter() - start < FAST


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["<think>", "</think>", "```", "```python\n", "\n", "x"]), max_size=30)
)
def test_think_blocks_are_removed_as_the_old_regex_did(pieces: list[str]) -> None:
    reply = "".join(pieces)
    old = re.sub(r"<think>.*?</think>", "", reply, flags=re.DOTALL)
    fenced = re.findall(r"```[^\n`]*\n(.*?)```", old, re.DOTALL)
    if fenced:
        assert extract_program(reply) == fenced[-1]
    elif not re.search(r"```[^\n`]*\n", old):
        assert extract_program(reply) == old
