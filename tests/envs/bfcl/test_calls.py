"""The call parser: both formats, literal-only values, clear refusals, never another exception."""

from __future__ import annotations

from keyword import iskeyword

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.envs.bfcl.calls import Call, CallParseError, decode, render_calls


def test_python_syntax_list_and_positional() -> None:
    d = decode("[cd(folder='document'), sort('final_report.pdf'), ls(a=True)]")
    assert d.format == "python"
    assert d.calls == (
        Call("cd", (), {"folder": "document"}),
        Call("sort", ("final_report.pdf",)),
        Call("ls", (), {"a": True}),
    )


def test_json_tool_calls_in_three_shapes() -> None:
    openai = (
        '{"tool_calls": [{"type": "function", '
        '"function": {"name": "ls", "arguments": "{\\"a\\": true}"}}]}'
    )
    assert decode(openai).calls == (Call("ls", (), {"a": True}),)
    assert decode('{"name": "cd", "arguments": {"folder": "x"}}').calls == (
        Call("cd", (), {"folder": "x"}),
    )
    bfcl_json = '```json\n[{"function": "cd", "parameters": {"folder": "x"}}]\n```'
    assert decode(bfcl_json).calls == (Call("cd", (), {"folder": "x"}),)


def test_plain_text_and_empty_list_are_no_calls() -> None:
    assert decode("All done, thanks!").calls == ()
    assert decode("[]").calls == ()
    assert decode("").calls == ()
    assert decode('{"answer": 42}').calls == ()


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        ("[f(x=g())]", "nested function call"),
        ("[f(x=y)]", "the name 'y'"),
        ("[f(x=1+2)]", "operators"),
        ("[f(x=lambda: 1)]", "lambda"),
        ("[__import__(name='os')]", "double underscores"),
        ("[os.system.__call__(cmd='ls')]", "double underscores"),
        ("[f(**{'a': 1})]", "**kwargs"),
        ("[f(*[1])]", "*args"),
        ("[f(a=1, a=2)]", "given twice"),
        ("[f(a=1)(b=2)]", "not a function name"),
        ("[f(a=" + "9" * 40 + ")]", "digits"),
        ("[f(a='x'", "could not parse"),
        ('{"name": 3}', "must be a string"),
        ('{"name": "f", "arguments": "{not json"}', "not valid JSON"),
        ("[1, 2, f()]" + "", "not a function call"),
    ],
)
def test_malformed_calls_are_refused_with_a_reason(reply: str, needle: str) -> None:
    with pytest.raises(CallParseError) as excinfo:
        decode(reply)
    assert needle in str(excinfo.value)


@given(st.text(max_size=300))
def test_any_string_decodes_or_is_refused(text: str) -> None:
    try:
        decode(text)
    except CallParseError as exc:
        assert str(exc)


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**9), 10**9)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


# Python keywords (``in``, ``if``) cannot be argument names in Python syntax; JSON calls allow them.
names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda n: not iskeyword(n))


@given(st.dictionaries(names, values, max_size=4))
def test_render_round_trips(kwargs: dict) -> None:
    call = Call("do_it", (), kwargs)
    assert decode(render_calls([call])).calls == (call,)
