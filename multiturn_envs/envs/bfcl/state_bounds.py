"""How large and how deep an agent may make a backend's state.

Why this module exists: BFCL's backends are plain Python objects the agent reshapes with its
calls, and a few shapes break everything that reads the state afterwards. ``cp`` of a directory
into itself makes the file system a cycle (``contents.copy()`` shares children), and copies of
copies make it a DAG whose tree view doubles with each ``cp``: ``find``, ``du``, BFCL's state
check and our state key then walk it for ever. 1,500 nested directories make ``pickle`` (our
snapshots) and ``==`` raise ``RecursionError``. So after each of the agent's calls the env
measures the state of the backend it called, as the tree those readers see: every container
and object counted each time it is reached (back-references named ``parent`` skipped, as the
file system's ``__eq__`` skips them), strings by length. A call that takes the state past
:class:`StateLimits` is undone (``multi_turn``), and its result says why.

The walk is iterative and stops at the first bound it passes, so it costs at most
``max_nodes`` steps however the state looks.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# values walked as leaves (they hold no references the agent can shape)
_LEAVES: frozenset[type] = frozenset(
    {
        str, bytes, int, float, bool, complex, type(None),
        datetime.datetime, datetime.date, datetime.time, datetime.timedelta, decimal.Decimal,
    }
)  # fmt: skip


@dataclass(frozen=True)
class StateLimits:
    """Bounds on one backend instance's state, as a tree (defaults: far above BFCL's own).

    Attributes:
        max_nodes: containers and objects (the largest BFCL state has 319).
        max_depth: nesting of containers and objects (the deepest has 10; a directory level
            is two: the directory and its ``contents`` dict).
        max_chars: characters of all strings (the largest has 63,442).
    """

    max_nodes: int = 20_000
    max_depth: int = 64
    max_chars: int = 16_000_000


_LEAF, _MAPPING, _SEQUENCE, _OBJECT = range(4)
# the kinds of the common types, read-only (each walk copies it and adds the types it meets)
_KNOWN_KINDS: Mapping[type, int] = MappingProxyType(
    {
        **dict.fromkeys(_LEAVES, _LEAF),
        dict: _MAPPING,
        list: _SEQUENCE,
        tuple: _SEQUENCE,
        set: _SEQUENCE,
        frozenset: _SEQUENCE,
    }
)


def _kind(kind: type) -> int:
    if kind in _LEAVES:
        return _LEAF
    if issubclass(kind, dict):
        return _MAPPING
    if issubclass(kind, list | tuple | set | frozenset):
        return _SEQUENCE
    return _OBJECT


def state_problem(state: Any, limits: StateLimits) -> str | None:
    """Why ``state`` is past ``limits`` (``None`` when it is within them).

    It runs after every agent call, so it classifies each type once per walk (a dict lookup
    then, not ``isinstance`` chains): ~6 us on a BFCL file system.
    """
    max_nodes, max_depth, max_chars = limits.max_nodes, limits.max_depth, limits.max_chars
    kinds = dict(_KNOWN_KINDS)
    nodes = chars = 0
    stack: list[tuple[Any, int]] = [(state, 0)]
    push, pop = stack.append, stack.pop
    while stack:
        value, depth = pop()
        nodes += 1
        if nodes > max_nodes:
            return (
                f"the backend state would hold more than {max_nodes:,} objects (counted as a "
                "tree: shared or cyclic parts count every time they are reached)"
            )
        if depth > max_depth:
            return f"the backend state would nest more than {max_depth} levels deep"
        kind = kinds.get(type(value))
        if kind is None:
            kind = kinds[type(value)] = _kind(type(value))
        if kind == _OBJECT:
            attributes = getattr(value, "__dict__", None)
            if attributes is None:
                continue
            for key, item in attributes.items():
                if key == "parent":  # the file system's back-reference
                    continue
                if type(item) is str:
                    chars += len(item)
                elif kinds.get(type(item)) != _LEAF:
                    push((item, depth + 1))
        elif kind != _LEAF:
            if kind == _MAPPING:
                for key in value:
                    if type(key) is str:
                        chars += len(key)
                value = value.values()
            for item in value:
                if type(item) is str:
                    chars += len(item)
                elif kinds.get(type(item)) != _LEAF:
                    push((item, depth + 1))
        if chars > max_chars:
            return f"the backend state would hold more than {max_chars:,} characters"
    return None
