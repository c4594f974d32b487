"""The process reward: the study's "exact process reward", as we operationalise it.

The study asks whether an exact process reward (the oracle's judgement of each step, its Q)
helps RL; it reports that it helps on FrozenLake and not on BFCL, and gives no formula. Ours,
the one ``multiturn-envs train`` trains with and every consumer reads:

    process = return + weight x process_score
    process_score = (sum of the turns' step credits) / N
    N = the turns taken if the task is solved, else the budget (no budget: the turns taken)

* a turn's **step credit** (:func:`step_credit`) is the oracle's ``info["step_score"]`` in
  [0, 1], but 0 for an unparsable reply (``info["parse_error"]``) and 0 for a turn taken from a
  state already lost (``info["state_value"] == 0``, where an env reports it: FrozenLake does);
* ``process_score`` is in [0, 1]; the default ``weight`` 0.5 keeps every solved episode (at
  least 1) above every unsolved one (at most 0.5).

Each rule closes a loophole GRPO found or review found (docs/rewards.md and docs/training.md
have the measurements): a mean over the turns taken paid one good move and then silence; the
oracle scores a wasted turn with slack left, and any move from a lost state, 1.0, so without
the two zero rules a rollout that wasted its budget earned the whole bonus; a sum over the
budget for a *solved* episode paid spending the slack instead of finishing; the turns a
*failed* episode took as N paid walking into a hole early.

Per-turn credits (what a turn-level consumer such as GiGPO or SkyRL trains on) are how much
each turn moved the score: ``reward_t + weight x step_credit_t / budget`` while the episode is
unsolved, and on the solving turn also the difference the smaller N makes. They sum to the score.

``step_credit`` (the reward) is the sum of the step credits, unnormalised and without the
return: the quantity ``gigpo_step_reward: "step_score"`` has always used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from multiturn_envs.deprecation import renamed_attribute
from multiturn_envs.rewards.base import EpisodeReward, PerTurnReward, check_number
from multiturn_envs.rewards.episode import Episode, Turn

__all__ = [
    "DEFAULT_WEIGHT",
    "Process",
    "ProcessState",
    "StepCredit",
    "process_score",
    "step_credit",
]

DEFAULT_WEIGHT = 0.5
"""The process reward's weight unless told otherwise (the study's arm)."""


def step_credit(info: Mapping[str, Any]) -> float | None:
    """What one turn earns in the process reward: its oracle ``step_score``, except 0 for an
    unparsable reply (not a move, whatever the oracle says of a wasted turn) and for a turn
    taken from a state already lost (``info["state_value"] == 0`` where the env reports it,
    FrozenLake does: there the oracle scores every move 1.0). ``None`` without a score."""
    score = info.get("step_score")
    if score is None:
        return None
    if info.get("parse_error") or info.get("state_value") == 0.0:
        return 0.0
    return float(score)


@dataclass(frozen=True)
class ProcessState:
    """The running aggregate the process reward is a function of.

    Attributes:
        budget: the episode's budget (reset ``info["max_turns"]``).
        success: whether the task is solved now.
        turns: turns taken.
        env_return: the sum of the env's rewards.
        credit_sum: the sum of the step credits of the turns that have one.
    """

    budget: int | None
    success: bool
    turns: int = 0
    env_return: float = 0.0
    credit_sum: float = 0.0

    @classmethod
    def initial(cls, start: Mapping[str, Any]) -> ProcessState:
        budget = start.get("max_turns")
        return cls(None if budget is None else int(budget), bool(start.get("success", False)))

    def then(self, turn: Turn) -> ProcessState:
        credit = step_credit(turn.info)
        return replace(
            self,
            success=bool(turn.info.get("success", False)),
            turns=self.turns + 1,
            env_return=self.env_return + float(turn.reward),
            credit_sum=self.credit_sum if credit is None else self.credit_sum + credit,
        )

    @property
    def process_score(self) -> float:
        """The step credits summed, over the turns a solved episode took and over the budget
        otherwise (turns not played earn 0, so ending early never pays more than playing on);
        without a budget, over the turns taken (which pays a good move followed by silence:
        give the env a budget to train on it)."""
        over = self.turns if self.success or not self.budget else int(self.budget)
        return self.credit_sum / over if over else 0.0


def process_score(episode: Episode) -> float:
    """:attr:`ProcessState.process_score` of ``episode``, in [0, 1]."""
    progress = ProcessState.initial(episode.start)
    for turn in episode.turns:
        progress = progress.then(turn)
    return progress.process_score


@dataclass(frozen=True)
class Process(EpisodeReward[ProcessState], name="process"):
    """THE process reward: the return plus ``weight`` x :func:`process_score` (module doc).

    Args:
        weight: the process part's weight, a finite number >= 0 (default 0.5).
    """

    weight: float = DEFAULT_WEIGHT

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "weight", check_number("process", "weight", self.weight, minimum=0)
        )

    def initial(self, start: Mapping[str, Any]) -> ProcessState:
        return ProcessState.initial(start)

    def fold(self, state: ProcessState, turn: Turn) -> ProcessState:
        return state.then(turn)

    def value(self, state: ProcessState) -> float:
        return state.env_return + self.weight * state.process_score


@dataclass(frozen=True)
class StepCredit(PerTurnReward, name="step_credit"):
    """Each turn earns its :func:`step_credit` (0 without a score); the score is their sum.

    The process reward's per-turn signal without its normalisation or the return: what GiGPO's
    return-to-go reads with ``gigpo_step_reward: "step_credit"`` (formerly ``"step_score"``).
    """

    def credit(self, turn: Turn) -> float:
        return step_credit(turn.info) or 0.0


def __getattr__(name: str) -> Any:
    """Old names, read for one release (:mod:`multiturn_envs.deprecation`): ``Progress`` is
    ``ProcessState`` (issue 33: two classes named ``Progress`` meant two things)."""
    return renamed_attribute(__name__, name, {"Progress": ProcessState})
