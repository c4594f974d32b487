"""TurnBudget: set (and optionally announce) the turn budget of any MT/* env.

The budget itself is enforced by :class:`multiturn_envs.core.TextEnv` (one mechanism, owned by
the env); this wrapper configures it before each ``reset``. In ``"hidden"`` mode nothing in the
observation reveals the budget, which is what makes one run at T_max give every Pass@(K,T) cell;
in ``"announced"`` mode each observation ends with ``[Turns left: n of T]``. The mode is in every
``info`` as ``budget_mode``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from multiturn_envs.core import TextEnv


def text_env_of(env: gym.Env[Any, Any]) -> TextEnv:
    """The :class:`TextEnv` under ``env``'s wrappers, or a clear ``TypeError``."""
    base = env.unwrapped
    if not isinstance(base, TextEnv):
        raise TypeError(f"{type(base).__name__} is not a multiturn_envs TextEnv")
    return base


class TurnBudget(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Give every episode a budget of ``max_turns`` agent turns.

    Args:
        env: any MT/* env.
        max_turns: the budget, a positive int.
        mode: ``"hidden"`` or ``"announced"``.
    """

    def __init__(self, env: gym.Env[str, str], max_turns: int, mode: str = "hidden") -> None:
        gym.utils.RecordConstructorArgs.__init__(self, max_turns=max_turns, mode=mode)
        gym.Wrapper.__init__(self, env)
        self.max_turns = max_turns
        self.mode = mode
        text_env_of(env).set_turn_budget(max_turns, mode)  # validates now, not at reset

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        text_env_of(self.env).set_turn_budget(self.max_turns, self.mode)
        return self.env.reset(seed=seed, options=options)
