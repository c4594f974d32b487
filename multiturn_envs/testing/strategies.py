"""Hypothesis strategies for what a model may reply to any env: for property tests of dynamics.

An env's actions are untrusted text: well-formed moves, tool calls (right and wrong), and
degenerate replies. These strategies draw each from what the env itself declares, so they fit
any :class:`~multiturn_envs.core.TextEnv`, ours or a user's:

* :func:`text_actions`: the env's finite action set when it has one (``valid_actions``), else
  its ``random_action`` drawn with a hypothesis-chosen generator;
* :func:`oracle_actions`: the oracle's ``expert_action`` or an ``error_action`` at the state
  the env is in when the action is drawn;
* :func:`tool_calls`: calls of the env's typed tools (:meth:`~multiturn_envs.core.TextEnv.tools`,
  read when drawn: BFCL's change with the task) with arguments drawn from each tool's JSON
  schema, and wrong ones (a missing or extra argument, a wrong type, an unknown tool);
* :func:`degenerate_replies`: empty and blank replies, one token repeated, markup left open,
  binary-looking and right-to-left text, the conformance check's hostile actions;
* :func:`actions`: all of these.

Strategies that read the env do it when a value is drawn, so draw them inside a rule
(``data.draw(actions(env))``) and they answer for the current state; the stateful machine of
:mod:`.env_machine` does. hypothesis is imported when a strategy is built: importing
:mod:`multiturn_envs.testing` never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from multiturn_envs.core import TextEnv
from multiturn_envs.testing.conformance import HOSTILE_ACTIONS
from multiturn_envs.tools import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, Tool, ToolCall

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["actions", "degenerate_replies", "oracle_actions", "text_actions", "tool_calls"]

REPEATED = ("a", " ", "\n", "<", ">", "{", "<tool_call>", "<answer>", "🤖", "\u202e", "guess")
"""Tokens a degenerate model repeats."""
OPEN_MARKUP = (
    "<answer>",
    "<think>",
    "```python\nprint(",
    TOOL_CALL_OPEN,
    f'{TOOL_CALL_OPEN}\n{{"name": ',
    f'{TOOL_CALL_OPEN}\n{{"name": "x", "arguments": {{}}}}\n{TOOL_CALL_CLOSE}' * 3,
    '{"name": "move", "arguments": "Down"}',
)
"""Markup left open, or almost right."""


def degenerate_replies(max_repeats: int = 5_000) -> SearchStrategy[str]:
    """Replies no env should fail on: blank, repeated tokens (up to ``max_repeats``), open
    markup, binary-looking and mixed-script text, and the conformance check's hostile ones."""
    from hypothesis import strategies as st

    return st.one_of(
        st.sampled_from([a for a in HOSTILE_ACTIONS if len(a) <= 10_000]),
        st.text(max_size=40),
        st.builds(lambda t, n: t * n, st.sampled_from(REPEATED), st.integers(1, max_repeats)),
        st.sampled_from(OPEN_MARKUP),
        st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    )


def text_actions(env: TextEnv) -> SearchStrategy[str]:
    """Well-formed text actions of ``env`` at the state it is in when drawn: one of its
    ``valid_actions()``, else its ``random_action`` with a drawn generator."""
    from hypothesis import strategies as st

    def draw(seed: int, pick: int) -> str:
        valid = env.valid_actions()
        if valid:
            return str(list(valid)[pick % len(valid)])
        return env.random_action(np.random.default_rng(seed))

    return st.builds(draw, st.integers(0, 2**32 - 1), st.integers(0, 2**16))


def oracle_actions(env: TextEnv) -> SearchStrategy[str]:
    """The oracle's actions at the state ``env`` is in when drawn: its ``expert_action`` or
    an ``error_action`` with a drawn generator (an empty reply once the episode is over)."""
    from hypothesis import strategies as st

    def draw(expert: bool, seed: int) -> str:
        if env.done or env.task_id is None:
            return ""
        if expert:
            return env.expert_action()
        return env.error_action(np.random.default_rng(seed))

    return st.builds(draw, st.booleans(), st.integers(0, 2**32 - 1))


def _value(schema: Mapping[str, Any]) -> SearchStrategy[Any]:
    """Values a JSON schema allows (an enum, a type, an array's items), as far as ours go."""
    from hypothesis import strategies as st

    if schema.get("enum"):
        return st.sampled_from(list(schema["enum"]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of(*(_value({**schema, "type": k}) for k in kind))
    if kind == "string":
        return st.text(max_size=30)
    if kind == "integer":
        return st.integers(-(2**31), 2**31)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = schema.get("items")
        return st.lists(_value(items if isinstance(items, Mapping) else {}), max_size=3)
    if kind == "object":
        return st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=3)
    return st.none() | st.booleans() | st.integers() | st.text(max_size=10)


_WRONG = (None, True, -1, 1e300, "", "x" * 300, [1, 2], {"a": 1})
"""Argument values of the wrong kind for most schemas."""


def _calls(tools: Sequence[Tool]) -> SearchStrategy[str]:
    from hypothesis import strategies as st

    if not tools:  # nothing to call: a reply that looks like a call all the same
        return st.sampled_from(OPEN_MARKUP)

    def right(tool: Tool) -> SearchStrategy[ToolCall]:
        properties = dict(tool.parameters.get("properties") or {})
        required = set(tool.parameters.get("required") or [])
        fixed = {k: _value(v) for k, v in properties.items() if k in required}
        optional = {k: _value(v) for k, v in properties.items() if k not in required}
        arguments = st.fixed_dictionaries(fixed, optional=optional)
        return arguments.map(lambda a: ToolCall(tool.name, a))

    def wrong(tool: Tool, edit: int, value: Any) -> ToolCall:
        names = list((tool.parameters.get("properties") or {}).keys())
        if edit == 0 or not names:  # an argument nobody declared
            return ToolCall(tool.name, {"unexpected": value})
        if edit == 1:  # every argument missing
            return ToolCall(tool.name, {})
        return ToolCall(tool.name, {n: value for n in names})  # each of the wrong kind

    good = st.sampled_from(list(tools)).flatmap(right)
    bad = st.builds(wrong, st.sampled_from(list(tools)), st.integers(0, 2), st.sampled_from(_WRONG))
    unknown = st.builds(lambda a: ToolCall("no_such_tool", {"x": a}), st.integers())
    return st.one_of(good, good, bad, unknown).map(lambda call: call.text())


def tool_calls(env: TextEnv) -> SearchStrategy[str]:
    """Calls of ``env``'s typed tools as action text (the canonical ``<tool_call>`` block),
    read from :meth:`~multiturn_envs.core.TextEnv.tools` when drawn: arguments from each
    tool's schema, and wrong ones. An env without tools gets near-calls (open markup)."""
    from hypothesis import strategies as st

    return st.builds(lambda: tuple(env.tools())).flatmap(_calls)


def actions(env: TextEnv, *, tools: bool = True, degenerate: bool = True) -> SearchStrategy[str]:
    """Any reply a model may give ``env`` (drawn at its current state): well-formed text, the
    oracle's moves, tool calls (``tools``) and degenerate replies (``degenerate``)."""
    from hypothesis import strategies as st

    parts = [text_actions(env), text_actions(env), oracle_actions(env)]
    if tools:
        parts.append(tool_calls(env))
    if degenerate:
        parts.append(degenerate_replies())
    return st.one_of(*parts)
