"""GuessEnv: the smallest complete ``TextEnv``, a template for new envs and the toy of our tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv

__all__ = ["GuessEnv"]


class GuessEnv(TextEnv):
    """Guess a secret number in [0, 15]; the env answers 'higher' or 'lower'.

    A deterministic toy with a finite action set and an exact oracle (binary search), used to
    test the base class, the wrappers and the conformance check without any real env.
    """

    def __init__(self, max_turns: int | None = 6, budget_mode: BudgetMode = "hidden") -> None:
        super().__init__(max_turns=max_turns, budget_mode=budget_mode)
        self._secret = 0
        self._lo, self._hi = 0, 15

    def task_ids(self) -> Sequence[str]:
        return [f"secret-{i}" for i in range(16)]

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        self._secret = int(task_id.split("-")[1])
        self._lo, self._hi = 0, 15
        return "Guess my number in [0, 15]. Reply 'guess N'."

    def valid_actions(self) -> Sequence[str]:
        return [f"guess {i}" for i in range(16)]

    def _parse(self, action: str) -> int | None:
        parts = action.strip().split()
        if len(parts) == 2 and parts[0] == "guess" and parts[1].isdigit():
            value = int(parts[1])
            return value if 0 <= value <= 15 else None
        return None

    def _score(self, guess: int | None) -> float:
        """1 for the secret; else the worst-case share of candidates the guess eliminates."""
        if guess is None or not self._lo <= guess <= self._hi:
            return 0.0
        if guess == self._secret:
            return 1.0
        width = self._hi - self._lo + 1
        return 1.0 - max(guess - self._lo, self._hi - guess) / width

    def _step(self, action: str) -> StepOutcome:
        guess = self._parse(action)
        score = self._score(guess)
        if guess is None:
            return StepOutcome(
                "I need 'guess N' with 0 <= N <= 15.",
                0.0,
                False,
                False,
                score,
                parse_error="unparseable",
            )
        if guess == self._secret:
            return StepOutcome("Correct!", 1.0, True, True, score)
        if guess < self._secret:
            self._lo = max(self._lo, guess + 1)
            return StepOutcome(f"{guess} is too low.", 0.0, False, False, score)
        self._hi = min(self._hi, guess - 1)
        return StepOutcome(f"{guess} is too high.", 0.0, False, False, score)

    def _get_state(self) -> Any:
        return {"secret": self._secret, "lo": self._lo, "hi": self._hi}

    def _set_state(self, state: Any) -> None:
        self._secret, self._lo, self._hi = state["secret"], state["lo"], state["hi"]

    def expert_action(self) -> str:
        return f"guess {(self._lo + self._hi) // 2}"

    def error_action(self, rng: np.random.Generator) -> str:
        wrong = [i for i in range(16) if i != self._secret]
        return f"guess {wrong[int(rng.integers(len(wrong)))]}"

    def state_key(self) -> str:
        return f"{self._secret}:{self._lo}-{self._hi}"
