"""MT/Terminal-v0: shell tasks in a fresh hardened container, one command per turn.

Names are imported on first use (PEP 562 ``__getattr__``), so ``python -m
multiturn_envs.envs.terminal.verify`` runs its module once, not after the env that imports it.
``Check`` (one check of a task) lives with the checker in :mod:`multiturn_envs.sandbox.checker`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiturn_envs.envs.terminal.env import TerminalEnv as TerminalEnv
    from multiturn_envs.envs.terminal.tasks import TerminalTask as TerminalTask
    from multiturn_envs.sandbox.checker import Check as Check

_HOMES = {
    "Check": "multiturn_envs.sandbox.checker",
    "TerminalEnv": f"{__name__}.env",
    "TerminalTask": f"{__name__}.tasks",
}
__all__ = ["Check", "TerminalEnv", "TerminalTask"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
