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
