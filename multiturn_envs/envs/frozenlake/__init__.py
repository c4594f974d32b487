"""MT/FrozenLake-v0: Gymnasium's FrozenLake-v1 grid world as a text env with an exact DP oracle.

Its names are imported on first use (the one style of an env package,
:mod:`multiturn_envs.envs.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv as FrozenLakeTextEnv

HOMES: dict[str, str] = {"FrozenLakeTextEnv": "env"}
"""Each public name -> the module it lives in."""
__all__ = ["FrozenLakeTextEnv"]
__getattr__, __dir__ = lazy_exports(__name__, HOMES)
