"""The string space shared by every MT/* env.

Gymnasium's ``spaces.Text`` rejects spaces, punctuation, newlines and most Unicode, so a prose
observation or an LLM's reply is "outside the space" and ``check_env`` fails. ``UnicodeText``
accepts any ``str`` whose length is within bounds; ``sample()`` returns short printable strings
(what ``check_env`` feeds an env as garbage actions).
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Space

_SAMPLE_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"


class UnicodeText(Space[str]):
    """Any Python ``str`` with ``min_length <= len(s) <= max_length``.

    Args:
        max_length: longest string in the space (``None``: unbounded).
        min_length: shortest string in the space (0 allows the empty string).
        sample_max_length: longest string ``sample()`` produces.
        seed: seed for ``sample()``.
    """

    def __init__(
        self,
        max_length: int | None = None,
        *,
        min_length: int = 0,
        sample_max_length: int = 32,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if min_length < 0 or (max_length is not None and max_length < min_length):
            raise ValueError(f"bad length bounds: min_length={min_length}, max_length={max_length}")
        self.min_length = min_length
        self.max_length = max_length
        self.sample_max_length = sample_max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise NotImplementedError("UnicodeText.sample takes no mask or probability")
        hi = self.sample_max_length
        if self.max_length is not None:
            hi = min(hi, self.max_length)
        lo = min(self.min_length, hi)
        length = int(self.np_random.integers(lo, hi + 1))
        chars = self.np_random.choice(len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in chars)

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str):
            return False
        if len(x) < self.min_length:
            return False
        return self.max_length is None or len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash(("UnicodeText", self.min_length, self.max_length))

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)
