"""Judge-style output comparison and functional-test helpers of the runner (pure functions)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.sandbox.judge import (
    outputs_match,
    parse_arguments,
    to_jsonable,
    truncate,
    values_match,
)

words = st.text(alphabet="abcxyz0123456789-.", min_size=1, max_size=6)
lines = st.lists(st.lists(words, min_size=1, max_size=5), min_size=1, max_size=5)


def test_exact_and_whitespace_tolerant() -> None:
    assert outputs_match("3\n", "3")
    assert outputs_match("1 2  3   \n4\n\n", "1 2 3\n4")
    assert outputs_match("  a\tb\n", "a b")
    assert not outputs_match("1 2 3", "1 2")
    assert not outputs_match("1\n2", "1 2")  # line structure counts
    assert not outputs_match("1\n\n2", "1\n2")  # inner blank lines count
    assert not outputs_match("", "0")


def test_decimal_equality_is_exact_without_tolerance() -> None:
    assert outputs_match("1.0", "1")
    assert outputs_match("1e3", "1000")
    assert outputs_match("-0.50", "-.5")
    assert not outputs_match("0.3333333", "0.33333333")
    assert not outputs_match("nan", "NaN")  # not a finite number: compared as strings
    assert outputs_match("0.3333333", "0.33333333", tolerance=1e-6)
    assert not outputs_match("0.33", "0.34", tolerance=1e-6)
    assert outputs_match("1000000.0", "1000000.5", tolerance=1e-6)  # relative


@given(lines, st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=1, max_size=3))
def test_whitespace_padding_never_changes_the_verdict(
    rows: list[list[str]], pads: list[str]
) -> None:
    expected = "\n".join(" ".join(row) for row in rows)
    sep = pads[0]
    padded = "\n".join(sep.join(row) + pads[-1] for row in rows) + "\n\n"
    assert outputs_match(padded, expected)
    assert outputs_match(expected, padded)


@given(lines, st.integers(min_value=0, max_value=4))
def test_a_changed_token_fails(rows: list[list[str]], which: int) -> None:
    expected = "\n".join(" ".join(row) for row in rows)
    row = rows[which % len(rows)]
    changed = [list(r) for r in rows]
    changed[which % len(rows)] = [*row[:-1], row[-1] + "q"]
    actual = "\n".join(" ".join(r) for r in changed)
    assert not outputs_match(actual, expected)


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_integers_match_their_float_spelling(n: int) -> None:
    assert outputs_match(f"{n}.0", str(n))
    assert not outputs_match(str(n + 1), str(n))


def test_values_match_json_semantics() -> None:
    assert values_match([1, [2, 3]], [1, [2, 3]])
    assert values_match(to_jsonable((1, (2, 3))), [1, [2, 3]])
    assert not values_match([1, 2], [2, 1])
    assert values_match({"a": 1}, {"a": 1})
    assert not values_match(0.1 + 0.2, 0.3)
    assert values_match(0.1 + 0.2, 0.3, tolerance=1e-9)
    assert values_match(True, True) and not values_match(True, False)


def test_parse_arguments_contract_and_lcb_shape() -> None:
    assert parse_arguments('[1, [2, 3], "x"]') == [1, [2, 3], "x"]
    assert parse_arguments("[5, 3, 10]\n5") == [[5, 3, 10], 5]  # LiveCodeBench: one per line
    assert parse_arguments("7") == [7]


@given(st.text(max_size=400), st.integers(min_value=10, max_value=100))
def test_truncate_keeps_head_and_tail(text: str, limit: int) -> None:
    out = truncate(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        half = limit // 2
        assert out.startswith(text[:half]) and out.endswith(text[-half:])
        assert "truncated" in out


def test_to_jsonable_round_trips() -> None:
    value = to_jsonable({"k": (1, 2), 3: {4, 5}})
    assert json.loads(json.dumps(value)) == {"k": [1, 2], "3": [4, 5]}
