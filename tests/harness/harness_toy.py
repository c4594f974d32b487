"""A tiny stochastic TextEnv for the harness tests, registered as ``MTToy/Line-v0`` on import.

The agent walks on a line towards a goal; with probability ``slip`` a move goes the other way
(drawn from ``np_random``, so seeds matter). Subprocess tests reach it with
``gym.make("harness_toy:MTToy/Line-v0")`` and ``PYTHONPATH`` set to this folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.core import StepOutcome, TextEnv

ENV_ID = "MTToy/Line-v0"


class LineEnv(TextEnv):
    """Walk from 0 to the goal ``g`` of task ``line-g``; reply ``left``, ``right`` or ``stay``."""

    def __init__(
        self, max_turns: int | None = 6, budget_mode: str = "hidden", slip: float = 0.25
    ) -> None:
        super().__init__(max_turns=max_turns, budget_mode=budget_mode)
        self.slip = slip
        self._pos = 0
        self._goal = 1

    def task_ids(self) -> Sequence[str]:
        return [f"line-{g}" for g in range(1, 7)]

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        self._goal = int(task_id.split("-")[1])
        self._pos = 0
        return f"You are at 0; the goal is at {self._goal}. Reply left, right or stay."

    def valid_actions(self) -> Sequence[str]:
        return ["left", "right", "stay"]

    def _step(self, action: str) -> StepOutcome:
        word = action.strip().lower()
        if word not in ("left", "right", "stay"):
            return StepOutcome("Reply left, right or stay.", 0.0, False, False, 0.0, "unparseable")
        move = {"left": -1, "right": 1, "stay": 0}[word]
        score = 1.0 if move == 1 else 0.0
        if move and self.np_random.random() < self.slip:
            move = -move
        self._pos = max(self._pos + move, 0)
        if self._pos == self._goal:
            return StepOutcome("You reached the goal!", 1.0, True, True, score)
        return StepOutcome(f"You are at {self._pos}.", 0.0, False, False, score)

    def _get_state(self) -> Any:
        return {"pos": self._pos, "goal": self._goal}

    def _set_state(self, state: Any) -> None:
        self._pos, self._goal = state["pos"], state["goal"]

    def expert_action(self) -> str:
        return "right"

    def error_action(self, rng: np.random.Generator) -> str:
        return "left" if self._pos > 0 else "stay"

    def state_key(self) -> str:
        return f"{self._goal}:{self._pos}"


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=LineEnv, max_episode_steps=None)


class SlowRandomPolicy:
    """The random baseline, sleeping a little per call so a test can kill a run midway."""

    name = "slow-random"

    def __init__(self, delay_s: float = 0.03) -> None:
        from multiturn_envs.policies.baselines import RandomPolicy

        self._inner = RandomPolicy()
        self.delay_s = delay_s

    def act(self, requests: Sequence[Any]) -> list[Any]:
        import time

        time.sleep(self.delay_s)
        return self._inner.act(requests)
