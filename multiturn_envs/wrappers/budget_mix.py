"""BudgetMix: draw the turn budget afresh at every ``reset`` (the study's training remedy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.wrappers.turn_budget import text_env_of

_BUDGET_MIX_STREAM = 0xB4D6  # keeps this wrapper's draws apart from the env's and other wrappers'


class BudgetMix(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Sample ``max_turns`` from ``budgets`` (with ``weights``) at every reset.

    The draw uses the wrapper's own generator, seeded from the ``reset`` seed, so it never shifts
    the env's ``np_random`` stream; ``reset(seed=s)`` always gives the same budget. The drawn budget
    is in ``info["max_turns"]``.

    Args:
        env: any MT/* env.
        budgets: candidate budgets (positive ints).
        weights: sampling weights, normalised (``None``: uniform).
        mode: ``"hidden"`` or ``"announced"``.
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        budgets: Sequence[int],
        weights: Sequence[float] | None = None,
        mode: str = "hidden",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            budgets=list(budgets),
            weights=None if weights is None else list(weights),
            mode=mode,
        )
        gym.Wrapper.__init__(self, env)
        if not budgets:
            raise ValueError("BudgetMix needs at least one budget")
        probs = (
            np.full(len(budgets), 1.0 / len(budgets))
            if weights is None
            else np.asarray(weights, dtype=float)
        )
        if probs.shape != (len(budgets),) or np.any(probs < 0) or probs.sum() <= 0:
            raise ValueError("weights must be non-negative, one per budget, not all zero")
        self.budgets = [int(b) for b in budgets]
        self.probs = probs / probs.sum()
        self.mode = mode
        base = text_env_of(env)
        for b in self.budgets:
            base.set_turn_budget(b, mode)  # validate every candidate now
        self._rng = np.random.default_rng()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(np.random.SeedSequence([seed, _BUDGET_MIX_STREAM]))
        budget = self.budgets[int(self._rng.choice(len(self.budgets), p=self.probs))]
        text_env_of(self.env).set_turn_budget(budget, self.mode)
        return self.env.reset(seed=seed, options=options)
