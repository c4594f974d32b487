"""TurnBudget: name (and optionally announce) the turn budget of every episode of any MT/* env.

The budget itself is enforced by :class:`multiturn_envs.core.TextEnv`, which decides it at each
``reset`` (one mechanism, owned by the env). This wrapper never reaches into the env: it passes
its budget as the reset options ``max_turns`` and ``budget_mode``, unless the caller of
``reset`` (or an outer wrapper) already named them, which then win (the precedence is in
:meth:`TextEnv.reset <multiturn_envs.core.TextEnv.reset>`). In ``"hidden"`` mode nothing in the
observation reveals the budget, which is what makes one run at T_max give every Pass@(K,T) cell;
in ``"announced"`` mode each observation ends with ``[Turns left: n of T]``. The mode is in
every ``info`` as ``budget_mode``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from multiturn_envs.core import TextEnv, check_budget


def text_env_of(env: gym.Env[Any, Any]) -> TextEnv:
    """The :class:`TextEnv` under ``env``'s wrappers, or a clear ``TypeError``."""
    base = env.unwrapped
    if not isinstance(base, TextEnv):
        raise TypeError(f"{type(base).__name__} is not a multiturn_envs TextEnv")
    return base


def with_budget(
    options: dict[str, Any] | None, max_turns: int | None, budget_mode: str
) -> dict[str, Any]:
    """``options`` plus this budget, for each of ``max_turns``/``budget_mode`` it does not name.

    The one rule every budget layer follows: a budget named closer to the caller wins.
    """
    out = dict(options or {})
    out.setdefault("max_turns", max_turns)
    out.setdefault("budget_mode", budget_mode)
    return out


class TurnBudget(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Give every episode a budget of ``max_turns`` agent turns.

    Args:
        env: any MT/* env.
        max_turns: the budget, a positive int.
        mode: ``"hidden"`` or ``"announced"``.

    Constructing it changes nothing in ``env``; the budget applies from the next ``reset``.
    """

    def __init__(self, env: gym.Env[str, str], max_turns: int, mode: str = "hidden") -> None:
        gym.utils.RecordConstructorArgs.__init__(self, max_turns=max_turns, mode=mode)
        gym.Wrapper.__init__(self, env)
        text_env_of(env)
        self.max_turns, self.mode = check_budget(max_turns, mode)  # validates now, not at reset

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        return self.env.reset(seed=seed, options=with_budget(options, self.max_turns, self.mode))
