"""MT/Terminal-v0: shell tasks in a fresh hardened container, one command per turn.

Names are imported on first use, so ``python -m multiturn_envs.envs.terminal.image`` (or
``.verify``) runs its module once, not after the env that imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.envs.terminal.checker import Check as Check
    from multiturn_envs.envs.terminal.env import TerminalEnv as TerminalEnv
    from multiturn_envs.envs.terminal.tasks import TerminalTask as TerminalTask

_EXPORTS = {"Check": "checker", "TerminalEnv": "env", "TerminalTask": "tasks"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
