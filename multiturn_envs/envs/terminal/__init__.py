"""MT/Terminal-v0: shell tasks in a fresh hardened container, one command per turn.

Its names are imported on first use (the one style of an env package,
:mod:`multiturn_envs.envs.lazy`). ``Check`` (one check of a task) is defined with the checker
that runs it (:mod:`multiturn_envs.sandbox.checker`) and read here through :mod:`.tasks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.envs.terminal.env import TerminalEnv as TerminalEnv
    from multiturn_envs.envs.terminal.tasks import TerminalTask as TerminalTask
    from multiturn_envs.sandbox.checker import Check as Check

HOMES: dict[str, str] = {"Check": "tasks", "TerminalEnv": "env", "TerminalTask": "tasks"}
"""Each public name -> the module it lives in."""
__all__ = ["Check", "TerminalEnv", "TerminalTask"]
__getattr__, __dir__ = lazy_exports(__name__, HOMES)
