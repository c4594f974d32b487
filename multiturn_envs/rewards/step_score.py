"""Rewards from the oracle's raw step score (``info["step_score"]``), without the process
reward's rules: ``shaped`` (a dense per-turn bonus) and ``mean_step_score``.

They are not the process reward (:mod:`multiturn_envs.rewards.process`): the raw score pays an
unparsable reply and a move from a lost state as the oracle scores them (often 1.0: nothing
left to lose), and a per-turn bonus pays long episodes more than short ones. They are what the
``ProcessReward`` wrapper, SkyRL's ``step_score_weight`` and the verifiers rubric have always
computed, under honest names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multiturn_envs.rewards.base import EpisodeReward, PerTurnReward, check_number
from multiturn_envs.rewards.episode import Turn


@dataclass(frozen=True)
class Shaped(PerTurnReward, name="shaped"):
    """Each turn earns ``outcome_weight x reward + weight x (step_score - baseline)``.

    A dense shaping of the env's reward by the oracle's score of every move (a missing score
    counts as 0). ``baseline`` centres the bonus: 0.5 makes poor moves cost reward instead of
    earning less.

    Args:
        weight: the step score's weight (default 0.1).
        outcome_weight: the env reward's weight (default 1.0).
        baseline: subtracted from the step score (default 0.0).
    """

    weight: float = 0.1
    outcome_weight: float = 1.0
    baseline: float = 0.0

    def __post_init__(self) -> None:
        for name in ("weight", "outcome_weight", "baseline"):
            object.__setattr__(self, name, check_number("shaped", name, getattr(self, name)))

    def bonus(self, turn: Turn) -> float:
        """The step-score part of the turn's credit: ``weight x (step_score - baseline)``."""
        score = turn.info.get("step_score")
        return self.weight * ((0.0 if score is None else float(score)) - self.baseline)

    def credit(self, turn: Turn) -> float:
        return self.outcome_weight * float(turn.reward) + self.bonus(turn)


@dataclass(frozen=True)
class _Mean:
    total: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class MeanStepScore(EpisodeReward[_Mean], name="mean_step_score"):
    """The mean oracle step score over the turns taken that have one (0.0 before the first).

    A description of the moves, not a training reward on its own (one good move and silence
    scores 1.0); the verifiers rubric weighs it beside ``success``.
    """

    def initial(self, start: Mapping[str, Any]) -> _Mean:
        return _Mean()

    def fold(self, state: _Mean, turn: Turn) -> _Mean:
        score = turn.info.get("step_score")
        if score is None:
            return state
        return _Mean(state.total + float(score), state.count + 1)

    def value(self, state: _Mean) -> float:
        return state.total / state.count if state.count else 0.0
