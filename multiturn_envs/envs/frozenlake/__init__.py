"""MT/FrozenLake-v0: Gymnasium's FrozenLake-v1 grid world as a text env with an exact DP oracle."""

from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv

__all__ = ["FrozenLakeTextEnv"]
