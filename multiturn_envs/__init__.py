"""multiturn-envs: multi-turn text environments with turn budgets and exact step-level oracles.

``import multiturn_envs`` registers every ``MT/*`` id with Gymnasium::

    import gymnasium as gym
    import multiturn_envs

    env = gym.make("MT/FrozenLake-v0", max_turns=8)
"""

from multiturn_envs.core import StepOutcome, TextEnv
from multiturn_envs.errors import EpisodeOver
from multiturn_envs.registration import env_ids, register_envs
from multiturn_envs.spaces import UnicodeText
from multiturn_envs.tools import Tool, ToolCall, ToolCallError
from multiturn_envs.version import __version__

register_envs()

__all__ = [
    "EpisodeOver",
    "StepOutcome",
    "TextEnv",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "UnicodeText",
    "__version__",
    "env_ids",
    "register_envs",
]
