"""Typed tools and tool calls as actions (:mod:`multiturn_envs.tools`): the canonical text, the
strict reader (hostile input included), the schema checks."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.tools import (
    MAX_CALL_CHARS,
    MAX_DEPTH,
    Tool,
    ToolCall,
    ToolCallError,
    action_text,
    call_from_openai,
    check_value,
    is_tool_call_text,
    read_tool_calls,
    tool_call_text,
    tool_from_openai,
)

MOVE = Tool(
    "move",
    "step",
    {
        "type": "object",
        "properties": {"direction": {"type": "string", "enum": ["Left", "Right"]}},
        "required": ["direction"],
        "additionalProperties": False,
    },
)
ANY = Tool(
    "anything",
    "takes any arguments",
    {"type": "object", "properties": {}, "additionalProperties": True},
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
def test_canonical_text_reads_back_to_the_same_call(arguments: dict[str, Any]) -> None:
    call = ToolCall("anything", arguments)
    text = call.text()
    assert is_tool_call_text(text) and is_tool_call_text("  \n" + text)
    assert read_tool_calls(text, [ANY]) == [call]
    assert action_text(call) == text and action_text([call]) == text


def test_several_calls_and_the_call_limit() -> None:
    calls = [ToolCall("move", {"direction": "Left"}), ToolCall("move", {"direction": "Right"})]
    text = tool_call_text(calls)
    assert read_tool_calls(text, [MOVE], max_calls=2) == calls
    with pytest.raises(ToolCallError, match="too many tool calls"):
        read_tool_calls(text, [MOVE], max_calls=1)
    # a flood of calls is cut at the limit, not parsed to the end
    flood = "<tool_call>{}</tool_call>" * 100_000
    t0 = time.perf_counter()
    with pytest.raises(ToolCallError, match="too many"):
        read_tool_calls(flood[: MAX_CALL_CHARS - 1], [MOVE], max_calls=3)
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<tool_call>{"name": "move", "arguments": {"direction": "Up"}}</tool_call>', "one of"),
        ('<tool_call>{"name": "move", "arguments": {}}</tool_call>', "lacks the required"),
        (
            '<tool_call>{"name": "move", "arguments": {"direction": 3}}</tool_call>',
            "must be string",
        ),
        (
            '<tool_call>{"name": "move", "arguments": {"direction": "Left", "x": 1}}</tool_call>',
            "no argument",
        ),
        ('<tool_call>{"name": "fly", "arguments": {}}</tool_call>', 'no tool "fly"'),
        ('<tool_call>{"name": "move"', "not closed"),
        ("<tool_call>not json</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name"'),
        ('<tool_call>{"name": "move", "args": {}}</tool_call>', "only"),
        ('<tool_call>{"name": "move", "arguments": "[1]"}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "move", "arguments": "{oops"}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "move", "arguments": {"direction": "Left"}}</tool_call> hi', "text"),
        (
            '<tool_call>{"name":"move","arguments":{},"parameters":{}}</tool_call>',
            "not both",
        ),
    ],
)
def test_malformed_calls_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ToolCallError, match=message):
        read_tool_calls(text, [MOVE])


def test_arguments_as_json_text_and_the_other_spelling_are_read() -> None:
    want = [ToolCall("move", {"direction": "Left"})]
    as_text = json.dumps({"name": "move", "arguments": json.dumps({"direction": "Left"})})
    assert read_tool_calls(f"<tool_call>{as_text}</tool_call>", [MOVE]) == want
    spelled = json.dumps({"name": "move", "parameters": {"direction": "Left"}})
    assert read_tool_calls(f"<tool_call>\n{spelled}\n</tool_call>", [MOVE]) == want


@pytest.mark.parametrize(
    "body",
    [
        "[" * 200_000,  # json gives up (RecursionError): refused, not a crash
        '{"name": "anything", "arguments": {"a": '
        + "[" * (MAX_DEPTH + 5)
        + "]" * (MAX_DEPTH + 5)
        + "}}",
        '{"name": "anything", "arguments": {"a": ' + "1" * 10_000 + "}}",  # int too long
        '{"name": "anything", "arguments": {"a": NaN}}',
    ],
)
def test_hostile_json_is_refused_quickly(body: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(ToolCallError):
        read_tool_calls(f"<tool_call>{body}</tool_call>", [ANY])
    assert time.perf_counter() - t0 < 2.0


def test_a_megabyte_call_is_refused_without_parsing() -> None:
    huge = (
        '<tool_call>{"name": "anything", "arguments": {"a": "' + "x" * (1 << 20) + '"}}</tool_call>'
    )
    t0 = time.perf_counter()
    with pytest.raises(ToolCallError, match="characters"):
        read_tool_calls(huge, [ANY])
    assert time.perf_counter() - t0 < 0.5


def test_loose_reading_leaves_names_and_values_to_the_env() -> None:
    text = '<tool_call>{"name": "unknown", "arguments": {"direction": 3}}</tool_call>'
    assert read_tool_calls(text, [MOVE], strict=False) == [ToolCall("unknown", {"direction": 3})]
    with pytest.raises(ToolCallError):
        read_tool_calls(text, [MOVE])


def test_schema_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 2},
            "s": {"type": "string", "maxLength": 3},
            "o": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
    }
    assert check_value({"n": 2, "xs": [1, 2.5], "s": "abc", "o": None}, schema, "f") is None
    assert "integer" in str(check_value({"n": True}, schema, "f"))  # a bool is no integer
    assert check_value({"n": 2.0}, schema, "f") is None  # 2.0 is an integer in JSON schema
    assert ">= 1" in str(check_value({"n": 0}, schema, "f"))
    assert "number" in str(check_value({"xs": ["a"]}, schema, "f"))
    assert "at most 2" in str(check_value({"xs": [1, 2, 3]}, schema, "f"))
    assert "at most 3" in str(check_value({"s": "abcd"}, schema, "f"))
    assert check_value({"o": 3}, schema, "f") is not None
    inf = {"type": "number"}
    assert check_value(float("inf"), inf, "x") is not None


def test_openai_forms() -> None:
    spec = MOVE.openai()
    assert spec["type"] == "function" and spec["function"]["name"] == "move"
    assert tool_from_openai(spec) == MOVE
    assert MOVE.mcp()["input_schema"] == dict(MOVE.parameters)
    call = ToolCall("move", {"direction": "Left"})
    wire = call.openai_wire("c1")
    assert json.loads(wire["function"]["arguments"]) == {"direction": "Left"}
    assert call_from_openai(wire) == call
    broken = call_from_openai({"function": {"name": "move", "arguments": "{oops"}})
    assert isinstance(broken, str) and is_tool_call_text(broken)
    with pytest.raises(ToolCallError, match="arguments"):  # the env reads it and says why
        read_tool_calls(broken, [MOVE])
    with pytest.raises(ValueError):
        Tool("bad name", "x")
    with pytest.raises(TypeError):
        action_text(42)  # type: ignore[arg-type]


# ------------------------------------------------------------------ calls as objects (issue 29)
def _deep(depth: int, kind: str) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value} if kind == "dict" else [value]
    return value


json_shapes = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)
"""Any JSON value, NaN and infinities included (``json.loads`` accepts them)."""


@settings(max_examples=200, deadline=None)
@given(
    name=json_shapes,
    arguments=json_shapes,
    depth=st.integers(0, 10_000),
    kind=st.sampled_from(["dict", "list"]),
)
def test_a_call_object_of_any_shape_or_depth_is_one_turn(
    name: Any, arguments: Any, depth: int, kind: str
) -> None:
    """Bound: ``env.step(ToolCall(...))`` with a name and arguments of any JSON type, the
    arguments nested up to 10,000 deep, answers with the env's observation (a turn spent: the
    reader refuses what is not a call of the env's tool with its message) in bounded time, and
    its recorded text is at most :data:`MAX_CALL_CHARS` plus the tags."""
    import gymnasium as gym

    import multiturn_envs  # noqa: F401

    env = gym.make("MT/FrozenLake-v0", max_turns=2, is_slippery=False).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    wrapped = {"x": _deep(depth, kind), "y": arguments} if depth else arguments
    start = time.perf_counter()
    observation, _, _, _, info = env.step(ToolCall(name, wrapped))  # type: ignore[arg-type]
    assert time.perf_counter() - start < 5
    assert env.turn == 1 and isinstance(observation, str)
    text = env.messages()[1]["content"]
    assert is_tool_call_text(text) and len(text) <= MAX_CALL_CHARS + 40
    if depth + 2 > MAX_DEPTH:  # refused for its depth, unless a NaN was read first
        assert info["parse_error"]
        assert "nested too deeply" in observation or "is not JSON" in observation
    if not isinstance(name, str):
        assert info["parse_error"]


def test_cyclic_and_shared_arguments_are_written_within_the_bounds() -> None:
    """Bound: a value that contains itself is as deep as the bound (written empty past it); one
    that shares its parts 2**20 times over is cut just past :data:`MAX_CALL_CHARS`."""
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    text = ToolCall("anything", cyclic).text()
    with pytest.raises(ToolCallError, match="nested too deeply"):
        read_tool_calls(text, [ANY])
    shared: Any = [0] * 1000
    for _ in range(20):
        shared = [shared, shared]
    start = time.perf_counter()
    text = ToolCall("anything", {"a": shared}).text()
    assert time.perf_counter() - start < 5
    assert MAX_CALL_CHARS < len(text) < MAX_CALL_CHARS + 100
    with pytest.raises(ToolCallError, match="at most"):
        read_tool_calls(text, [ANY])


@pytest.mark.parametrize(
    "arguments",
    [{"a": {1, 2}}, {"a": b"x"}, {(1, 2): 3}, {"a": object()}, {"a": 10**5000}],
    ids=["set", "bytes", "tuple key", "object", "a 5000-digit int"],
)
def test_a_value_no_model_can_produce_is_the_programs_type_error(arguments: Any) -> None:
    """Not JSON at all (only a program builds one): ``TypeError`` naming where, not a turn."""
    with pytest.raises(TypeError, match="a tool call's arguments"):
        ToolCall("anything", arguments).text()


@settings(max_examples=300, deadline=None)
@given(entry=json_shapes, depth=st.integers(0, 2_000), as_text=st.booleans())
def test_an_openai_entry_of_any_shape_is_a_call_or_its_text(
    entry: Any, depth: int, as_text: bool
) -> None:
    """Bound: :func:`call_from_openai` reads any entry (any JSON shape; ``function.arguments``
    nested up to 2,000 deep, as an object or as JSON text) into a :class:`ToolCall` within the
    reader's bounds or a ``<tool_call>`` text the reader refuses, never an exception."""
    text_form = '{"a": ' * depth + "1" + "}" * depth
    arguments = text_form if as_text else _deep(depth, "dict")
    shaped = [
        entry,
        {"function": entry},
        {"function": {"name": "anything", "arguments": arguments}},
        {"function": {"name": entry, "arguments": entry}},
    ]
    for item in shaped:
        read = call_from_openai(item)
        text = read.text() if isinstance(read, ToolCall) else read
        assert is_tool_call_text(text) and len(text) <= MAX_CALL_CHARS + 40
        try:
            calls = read_tool_calls(text, [ANY], strict=False)
        except ToolCallError:
            assert not isinstance(read, ToolCall) or read.name != "anything"
        else:
            assert isinstance(read, ToolCall) and calls == [read]
