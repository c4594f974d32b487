"""JSON from untrusted text under bounds: its size and its nesting depth, checked before parsing.

Two readers take JSON from outside: the env server (a client's frames, :mod:`.server.protocol`)
and the record reader (files anyone may hand to ``report``, :mod:`.harness.records`). Both go
through :func:`loads_bounded`, which refuses, with a :class:`JSONLimitError` that says which
bound and how far over it:

* text over ``max_bytes`` (a length check, nothing is scanned);
* text nested deeper than ``max_depth`` (``[[[[...``): found by a linear scan at C speed
  before ``json.loads`` runs, so no parser recursion, and no deep structure reaches the code
  that handles the value (a deep-copy, a ``repr``, an ``==``: each would recurse again).

Text that ``json`` itself rejects raises ``ValueError`` (``json.JSONDecodeError``) as usual.
The happy path costs two ``str.count`` calls: text with no more openers than ``max_depth``
cannot be nested deeper, and only text with many brackets is scanned.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from multiturn_envs.errors import UntrustedInputError

MAX_DEPTH = 64
"""The default nesting bound: far above any record, config or frame this package writes."""

_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)


class JSONLimitError(UntrustedInputError):
    """JSON text over a size or depth bound (refused before it is parsed)."""


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in ``text`` outside strings, in linear time.

    Escapes are dropped first (``\\"`` can no longer end a string), then strings (``"..."``,
    which hold no quote after that), then everything but brackets; the depth is the largest
    running sum of +1 per opener and -1 per closer (a vectorised cumulative sum). Unbalanced
    text gets the depth its openers reach, which is all a bound needs.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where(np.isin(codes, _OPEN), 1, -1).astype(np.int64)
    return int(np.cumsum(steps).max(initial=0))


def check_bounds(text: str, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> None:
    """:class:`JSONLimitError` if ``text`` is over ``max_bytes`` characters or nested deeper
    than ``max_depth``; nothing is parsed."""
    if len(text) > max_bytes:
        raise JSONLimitError(f"{len(text):,} characters, over the limit of {max_bytes:,}")
    if text.count("[") + text.count("{") <= max_depth:
        return
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JSONLimitError(f"nested {depth} deep, over the limit of {max_depth}")


def loads_bounded(text: str | bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)`` once ``text`` is within ``max_bytes`` and ``max_depth``.

    Bytes are decoded as UTF-8 first (``UnicodeDecodeError``, a ``ValueError``, if they are
    not). Raises :class:`JSONLimitError` over a bound and ``ValueError`` for text that is not
    JSON.
    """
    if isinstance(text, bytes | bytearray):
        if len(text) > max_bytes:
            raise JSONLimitError(f"{len(text):,} bytes, over the limit of {max_bytes:,}")
        text = bytes(text).decode("utf-8")
    check_bounds(text, max_bytes=max_bytes, max_depth=max_depth)
    return json.loads(text)
