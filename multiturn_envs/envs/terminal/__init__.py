"""MT/Terminal-v0: shell tasks in a fresh hardened container, one command per turn.

Names are imported on first use (PEP 562 ``__getattr__``), so ``python -m
multiturn_envs.envs.terminal.image`` (or ``.verify``) runs its module once, not after the env
that imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiturn_envs.envs.terminal.checker import Check as Check
    from multiturn_envs.envs.terminal.env import TerminalEnv as TerminalEnv
    from multiturn_envs.envs.terminal.tasks import TerminalTask as TerminalTask

_HOMES = {"Check": "checker", "TerminalEnv": "env", "TerminalTask": "tasks"}
__all__ = ["Check", "TerminalEnv", "TerminalTask"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
