"""Old spellings, kept for one release: the one way a renamed argument or name still works.

A rename (issue 33: timeouts as ``*_timeout_s``, ``Limits`` and ``Progress`` given distinct
names) must not break a user's code or a record's ``env_spec`` at once. The old spelling keeps
working for one release with a ``DeprecationWarning`` that says what to write instead, and
CHANGELOG.md lists it; the next release removes it.

* :func:`renamed_kwargs`: a function's old keyword argument, read as the new one;
* :func:`renamed_attribute`: a module's old name (its ``__getattr__``), read as the new one.

Layer 0: it imports nothing of ours.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["renamed_attribute", "renamed_kwargs"]


def renamed_kwargs(
    where: str,
    old: Mapping[str, Any],
    renames: Mapping[str, str],
    current: Mapping[str, Any],
    defaults: Mapping[str, Any],
) -> dict[str, Any]:
    """The new arguments' values, with old spellings folded in (each with a
    ``DeprecationWarning`` saying what to write).

    Args:
        where: whose arguments (``"InterCodeSQLEnv"``), for the messages.
        old: the old spellings the caller was given (its ``**old``); a name not in
            ``renames`` is a ``TypeError``, as Python says for an unknown argument.
        renames: old name -> new name.
        current: new name -> the value the caller got for it.
        defaults: new name -> its default; an old spelling beside a new one that is not at
            its default is a ``TypeError`` (which one was meant?).
    """
    unknown = sorted(set(old) - set(renames))
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword argument(s) {unknown}")
    out = dict(current)
    for name, value in old.items():
        new = renames[name]
        if current[new] != defaults[new]:
            raise TypeError(f"{where}() got {name} and {new}: give {new} alone")
        warnings.warn(
            f"{where}: {name} is deprecated, write {new}={value!r}",
            DeprecationWarning,
            stacklevel=3,
        )
        out[new] = value
    return out


def renamed_attribute(module: str, name: str, renames: Mapping[str, Any]) -> Any:
    """A module ``__getattr__``'s answer: the new object for an old name (with a
    ``DeprecationWarning``), else Python's ``AttributeError``."""
    if name in renames:
        new = renames[name]
        warnings.warn(
            f"{module}.{name} is deprecated, use {module}.{getattr(new, '__name__', new)}",
            DeprecationWarning,
            stacklevel=3,
        )
        return new
    raise AttributeError(f"module {module!r} has no attribute {name!r}")
