"""BudgetMix: draw the turn budget afresh at every ``reset`` (the study's training remedy).

Like :class:`~multiturn_envs.wrappers.TurnBudget` it never reaches into the env: the drawn
budget travels as the reset options ``max_turns``/``budget_mode``, unless the caller of
``reset`` (a dataset row, the harness's run) or an outer wrapper already named them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.core import check_budget
from multiturn_envs.wrappers.turn_budget import text_env_of, with_budget

_BUDGET_MIX_STREAM = 0xB4D6  # keeps this wrapper's draws apart from the env's and other wrappers'
MAX_LISTED_BUDGETS = 1_000_000
"""Candidates a list may hold; longer uniform sets are given as a ``range`` (never listed)."""


class BudgetMix(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Sample ``max_turns`` from ``budgets`` (with ``weights``) at every reset.

    The draw uses the wrapper's own generator, seeded from the ``reset`` seed, so it never shifts
    the env's ``np_random`` stream; ``reset(seed=s)`` always gives the same budget. The drawn budget
    is in ``info["max_turns"]``. Every reset draws, also one whose caller names the budget (which
    then wins), so the draws of later resets do not depend on it. Constructing it changes
    nothing in ``env``.

    Args:
        env: any MT/* env.
        budgets: candidate budgets (positive ints): a list of at most
            :data:`MAX_LISTED_BUDGETS`, or a ``range`` of any length (e.g. ``range(1, 10**9)``),
            which is never materialised (drawn uniformly by index when longer than that).
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
        if not budgets:
            raise ValueError("BudgetMix needs at least one budget")
        huge = len(budgets) > MAX_LISTED_BUDGETS
        if huge and not isinstance(budgets, range):
            raise ValueError(
                f"BudgetMix takes at most {MAX_LISTED_BUDGETS} listed budgets, got "
                f"{len(budgets)}; give a uniform set as a range (e.g. range(1, 10**9))"
            )
        if huge and weights is not None:
            raise ValueError(
                "weights are for listed budgets; a range longer than "
                f"{MAX_LISTED_BUDGETS} is drawn uniformly"
            )
        gym.utils.RecordConstructorArgs.__init__(
            self,
            budgets=budgets if huge else list(budgets),
            weights=None if weights is None else list(weights),
            mode=mode,
        )
        gym.Wrapper.__init__(self, env)
        self.budgets: Sequence[int] = budgets if huge else [int(b) for b in budgets]
        self.probs: np.ndarray | None = None
        if not huge:
            probs = (
                np.full(len(budgets), 1.0 / len(budgets))
                if weights is None
                else np.asarray(weights, dtype=float)
            )
            if probs.shape != (len(budgets),) or np.any(probs < 0) or probs.sum() <= 0:
                raise ValueError("weights must be non-negative, one per budget, not all zero")
            self.probs = probs / probs.sum()
        text_env_of(env)
        # validate every candidate now (a range's smallest and largest stand for all of it)
        for b in (budgets[0], budgets[-1]) if huge else self.budgets:
            check_budget(b, mode)
        self.mode = mode
        self._rng = np.random.default_rng()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(np.random.SeedSequence([seed, _BUDGET_MIX_STREAM]))
        if self.probs is None:
            budget = int(self.budgets[int(self._rng.integers(len(self.budgets)))])
        else:
            budget = self.budgets[int(self._rng.choice(len(self.budgets), p=self.probs))]
        return self.env.reset(seed=seed, options=with_budget(options, budget, self.mode))
