"""MT/DeepCoder-v0: multi-turn code repair, each submission's tests run in a sandbox.

Its names are imported on first use (the one style of an env package,
:mod:`multiturn_envs.envs.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.envs.deepcoder.env import DeepCoderEnv as DeepCoderEnv
    from multiturn_envs.envs.deepcoder.tasks import CodeTask as CodeTask

HOMES: dict[str, str] = {"DeepCoderEnv": "env", "CodeTask": "tasks"}
"""Each public name -> the module it lives in."""
__all__ = ["CodeTask", "DeepCoderEnv"]
__getattr__, __dir__ = lazy_exports(__name__, HOMES)
