"""The outcome rewards: what the env itself pays (``outcome``) and whether the task was solved
(``success``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multiturn_envs.rewards.base import EpisodeReward, PerTurnReward
from multiturn_envs.rewards.episode import Turn


@dataclass(frozen=True)
class Outcome(PerTurnReward, name="outcome"):
    """The env's own reward: each turn earns what ``step`` returned; the score is the return.

    On every MT/* env that is the outcome (1.0 on the turn that solves the task, 0 elsewhere,
    unless an env says otherwise); an env wrapped in a reward wrapper pays what the wrapper
    returns. The default of every consumer (TRL's ``get_reward``, verl's ``reward_score``, the
    server's per-step reward, GiGPO's step returns).
    """

    def credit(self, turn: Turn) -> float:
        return float(turn.reward)


@dataclass(frozen=True)
class Success(EpisodeReward[bool], name="success"):
    """1.0 when the task is solved after the last turn, else 0.0 (``info["success"]``).

    A turn's credit is the change it made: 1.0 on the solving turn, 0 elsewhere.
    """

    def initial(self, start: Mapping[str, Any]) -> bool:
        return bool(start.get("success", False))

    def fold(self, state: bool, turn: Turn) -> bool:
        return bool(turn.info.get("success", False))

    def value(self, state: bool) -> float:
        return 1.0 if state else 0.0
