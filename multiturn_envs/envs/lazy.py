"""The one style of an env package's ``__init__``: its names, imported on first use.

Every ``multiturn_envs/envs/<name>/__init__.py`` is the same few lines: a docstring that
starts with the env's id, a ``TYPE_CHECKING`` block importing its public names (for type
checkers), ``HOMES`` (each public name -> the module it lives in), ``__all__``, and
``__getattr__, __dir__ = lazy_exports(__name__, HOMES)`` (PEP 562). Importing the package then
imports nothing else: the registration's ``"module:Class"`` entry points stay lazy, and
``python -m multiturn_envs.envs.terminal.verify`` runs its module once, not again after the env
that imports it. ``tests/envs/test_env_packages.py`` holds every env package to it, and the
env template (:mod:`multiturn_envs.testing.env_template`) shows it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``homes`` is imported from its
    module (``package.<module>``) when first asked for; any other is an ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
