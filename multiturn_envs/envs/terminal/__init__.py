"""MT/Terminal-v0: shell tasks in a fresh hardened container, one command per turn.

Its names are imported on first use (the one style of an env package,
:mod:`multiturn_envs.envs.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.envs.terminal.checker import Check as Check
    from multiturn_envs.envs.terminal.env import TerminalEnv as TerminalEnv
    from multiturn_envs.envs.terminal.tasks import TerminalTask as TerminalTask

HOMES: dict[str, str] = {"Check": "checker", "TerminalEnv": "env", "TerminalTask": "tasks"}
"""Each public name -> the module it lives in."""
__all__ = ["Check", "TerminalEnv", "TerminalTask"]
__getattr__, __dir__ = lazy_exports(__name__, HOMES)
