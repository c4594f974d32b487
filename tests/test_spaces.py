from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.spaces import UnicodeText


@given(st.text(max_size=200))
def test_unbounded_space_contains_every_string(s: str) -> None:
    assert UnicodeText().contains(s)


@given(st.text(max_size=40), st.integers(0, 20), st.integers(0, 20))
def test_bounds_are_respected(s: str, lo: int, extra: int) -> None:
    space = UnicodeText(lo + extra, min_length=lo)
    assert space.contains(s) == (lo <= len(s) <= lo + extra)


@pytest.mark.parametrize("value", [b"bytes", 3, None, ["a"]])
def test_non_strings_are_outside(value: object) -> None:
    assert not UnicodeText().contains(value)


def test_samples_are_members_and_seeded() -> None:
    a, b = UnicodeText(10, min_length=2, seed=7), UnicodeText(10, min_length=2, seed=7)
    samples = [a.sample() for _ in range(50)]
    assert samples == [b.sample() for _ in range(50)]
    assert all(a.contains(s) for s in samples)


def test_bad_bounds_raise() -> None:
    with pytest.raises(ValueError):
        UnicodeText(3, min_length=5)


def test_equality() -> None:
    assert UnicodeText(5) == UnicodeText(5)
    assert UnicodeText(5) != UnicodeText(6)
