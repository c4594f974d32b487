"""Registers every MT/* id with Gymnasium; called once by ``import multiturn_envs``.

Gymnasium 1.x reads no plugin entry points, so registration happens at import (the Minigrid
pattern). Entry points are lazy ``"module:Class"`` strings: importing the package never imports
an env's heavy dependencies. ``max_episode_steps=None`` everywhere: the turn budget is the env's
own ``max_turns`` (see :mod:`multiturn_envs.core`), never a competing ``TimeLimit``.
"""

from __future__ import annotations

import gymnasium as gym

# (id, entry point): one line per env. Keep it sorted by id.
ENV_ENTRY_POINTS: tuple[tuple[str, str], ...] = (
    ("MT/BFCL-v0", "multiturn_envs.envs.bfcl.env:BFCLEnv"),
    ("MT/DeepCoder-v0", "multiturn_envs.envs.deepcoder.env:DeepCoderEnv"),
    ("MT/FrozenLake-v0", "multiturn_envs.envs.frozenlake.env:FrozenLakeTextEnv"),
    ("MT/InterCode-SQL-v0", "multiturn_envs.envs.intercode_sql.env:InterCodeSQLEnv"),
    ("MT/Terminal-v0", "multiturn_envs.envs.terminal.env:TerminalEnv"),
)


def register_envs() -> None:
    """Register (or re-register, silently) every MT/* env."""
    for env_id, entry_point in ENV_ENTRY_POINTS:
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, entry_point=entry_point, max_episode_steps=None)


def env_ids() -> list[str]:
    """The ids of all MT/* envs this package registers."""
    return [env_id for env_id, _ in ENV_ENTRY_POINTS]
