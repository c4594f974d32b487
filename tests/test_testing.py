"""The conformance check passes a good env and catches broken ones."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from multiturn_envs.core import StepOutcome
from multiturn_envs.testing import GuessEnv, check_text_env


def test_conforming_env_passes() -> None:
    check_text_env(GuessEnv)


class _GlobalRandomEnv(GuessEnv):
    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        super()._load_task(task_id, options)
        return f"Guess my number. (noise {random.random()})"


class _RaisingEnv(GuessEnv):
    def _step(self, action: str) -> StepOutcome:
        if not action.strip():
            raise ValueError("empty")
        return super()._step(action)


class _LeakyScoreEnv(GuessEnv):
    def score_action(self, action: str) -> float:
        self._lo = 3  # changes the state: forbidden
        return 0.5


class _TerminatingErrorEnv(GuessEnv):
    def error_action(self, rng: np.random.Generator) -> str:
        return f"guess {self._secret}"


class _BadSnapshotEnv(GuessEnv):
    def _set_state(self, state: Any) -> None:
        self._secret = state["secret"]  # forgets lo/hi


@pytest.mark.parametrize(
    ("env_cls", "message"),
    [
        (_GlobalRandomEnv, "eterministic|different|diverged"),
        (_RaisingEnv, "raised"),
        (_LeakyScoreEnv, "score_action changed"),
        (_TerminatingErrorEnv, "expert scores|ended the episode"),
        (_BadSnapshotEnv, "restore|score_action changed"),
    ],
)
def test_broken_envs_are_caught(env_cls: type[GuessEnv], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_text_env(env_cls)
