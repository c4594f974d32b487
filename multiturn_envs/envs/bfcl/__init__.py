"""MT/BFCL-v0: the Berkeley Function-Calling Leaderboard's multi-turn stateful tasks and single-
turn AST categories.

Its names are imported on first use (the one style of an env package,
:mod:`multiturn_envs.envs.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.envs.bfcl.env import BFCLEnv as BFCLEnv

HOMES: dict[str, str] = {"BFCLEnv": "env"}
"""Each public name -> the module it lives in."""
__all__ = ["BFCLEnv"]
__getattr__, __dir__ = lazy_exports(__name__, HOMES)
