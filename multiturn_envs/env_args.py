"""``key=value`` strings to ``gym.make`` keyword arguments (the CLI's and the server's
``--env-arg``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from multiturn_envs.safejson import JSONLimitError, check_bounds

MAX_ARG_DEPTH = 64
"""The deepest JSON value an env argument may be (checked before it is parsed)."""

__all__ = ["parse_env_args"]


def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``["size=8", "is_slippery=false", "name=abc"]`` -> kwargs: a value that parses as JSON is
    taken as such, else as a string; a pair without ``=`` or a key that is not a Python name
    is a ``ValueError``, and so is a value nested deeper than :data:`MAX_ARG_DEPTH` (measured
    before it is parsed: no ``RecursionError``)."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(
                f"an env argument is key=value with a Python identifier key, got {pair!r}"
            )
        try:
            check_bounds(raw, max_bytes=len(raw), max_depth=MAX_ARG_DEPTH)
        except JSONLimitError as exc:
            raise ValueError(f"the env argument {key} is refused: {exc}") from None
        try:
            kwargs[key] = json.loads(raw)
        except ValueError:
            kwargs[key] = raw
    return kwargs
