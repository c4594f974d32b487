"""A memo of per-query work (sqlglot rewrites, plans), bounded in entries and characters.

The env remembers, per query text, what the MySQL emulation made of it (a parse costs 1-3 ms,
and agents repeat queries). Keys are agent text: a hostile agent sending distinct 20,000-
character queries would otherwise grow each memo by up to ~8,000 of them (hundreds of MB). So
a memo is emptied when it passes :data:`MAX_ENTRIES` entries or :data:`MAX_CHARS` characters
of keys and values.
"""

from __future__ import annotations

from typing import Generic, TypeVar

V = TypeVar("V")

MAX_ENTRIES = 8_192
MAX_CHARS = 4_000_000


class QueryCache(Generic[V]):
    """``key -> value`` where the key is query text (with anything else in a tuple)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_chars: int = MAX_CHARS) -> None:
        self._data: dict[object, V] = {}
        self._chars = 0
        self.max_entries = max_entries
        self.max_chars = max_chars

    def __len__(self) -> int:
        return len(self._data)

    @property
    def chars(self) -> int:
        """Characters of text the memo holds now."""
        return self._chars

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: object) -> V | None:
        return self._data.get(key)

    def __getitem__(self, key: object) -> V:
        return self._data[key]

    def put(self, key: object, value: V, chars: int) -> None:
        """Remember ``value``; ``chars`` is the text the entry holds (key and value)."""
        if len(self._data) >= self.max_entries or self._chars + chars > self.max_chars:
            self._data.clear()
            self._chars = 0
        if chars <= self.max_chars:
            self._data[key] = value
            self._chars += chars
