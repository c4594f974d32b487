"""How an episode ran: :class:`EpisodeLog`, and why it ended in one vocabulary (:data:`ENDS`).

Every edge that plays an episode for someone else keeps the same log (TRL's environments,
SkyRL's env, verl's agent loop, verifiers' env, and through TRL's environments the trainer):
the reset ``info``, each turn as the env returned it, the first turn that solved the task, the
running score under a registered reward, and why the episode ended. Each framework's own keys
are derived from it by its adapter (TRL's inspection properties, verl's ``extra_fields``,
verifiers' trace dict, SkyRL's metrics), so they cannot drift apart. The models are
Gymnasium's ``RecordEpisodeStatistics`` (return and length, kept as the episode runs) and
inspect_ai's ``TaskState`` (the messages, whether and why the sample completed).

**Why an episode ended.** An episode ends once, for one :class:`End` of :data:`ENDS`: the env
ended it (``success``, ``terminal``, or a truncation such as ``turn_budget``, read from the
env's ``info["truncation_reason"]``), the agent did (``agent_stopped``: a reply without a tool
call), or the framework running it did (a cap on turns or tokens, the harness's token limit).
A new reason is one more entry in :data:`ENDS`; an adapter that spells reasons its framework's way
maps only the names it renames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, SupportsFloat

from multiturn_envs.rewards import Episode, MeanStepScore, Outcome, Reward, Tally, Turn

__all__ = ["ENDS", "End", "EpisodeLog", "env_end"]


@dataclass(frozen=True)
class End:
    """One reason an episode ends.

    Attributes:
        name: its name in the one vocabulary (``EpisodeLog.end``, summaries, docs).
        by: who ended it: the ``env``, the ``agent`` or the ``framework`` running the episode.
        truncated: the episode was cut short rather than finished (a budget or a cap).
        note: how a model is told, after "The episode is over: " (TRL's last tool result).
    """

    name: str
    by: Literal["env", "agent", "framework"]
    truncated: bool
    note: str


ENDS: dict[str, End] = {
    end.name: end
    for end in (
        End("success", "env", False, "the task is solved"),
        End("terminal", "env", False, "a terminal state was reached"),
        End("turn_budget", "env", True, "the turn budget is spent"),
        End("agent_stopped", "agent", False, "the agent answered without a tool call"),
        End("turn_cap", "framework", True, "the trainer's cap on agent turns is reached"),
        End("user_turn_cap", "framework", True, "the trainer's cap on env turns is reached"),
        End("response_length", "framework", True, "the trainer's cap on tokens is reached"),
        End("token_limit", "framework", True, "the episode's token limit is reached"),
    )
}
"""Every reason an episode ends, by name. ``turn_budget`` is also the env's
``info["truncation_reason"]`` for a spent budget (:class:`~multiturn_envs.core.TextEnv`);
``token_limit`` is the harness's per-episode limit on the policy's tokens
(``EvalConfig.token_limit``: the env counts turns, the runner counts tokens), written as a
record's ``truncation_reason``."""


def env_end(terminated: bool, truncated: bool, info: Mapping[str, Any]) -> End | None:
    """Why the env ended the episode at a turn that returned these flags (``None``: it did
    not): success (the task is solved, even at the budget's last turn), a terminal state, or
    the truncation its ``info`` names (a spent budget when it names none we know)."""
    if (terminated or truncated) and info.get("success"):
        return ENDS["success"]
    if terminated:
        return ENDS["terminal"]
    if truncated:
        reason = info.get("truncation_reason")
        return (
            ENDS.get(reason, ENDS["turn_budget"])
            if isinstance(reason, str)
            else (ENDS["turn_budget"])
        )
    return None


class EpisodeLog:
    """One episode as it runs: fill it with :meth:`begin`, :meth:`add` and :meth:`stop`; read
    its turns, its end, its first success, its step scores, its score and :meth:`summary`.

    Args:
        reward: the registered reward whose per-turn credits :meth:`add` returns and whose
            score :attr:`score` is (default ``outcome``, the env's own reward).
    """

    def __init__(self, reward: Reward | None = None) -> None:
        self.reward: Reward = Outcome() if reward is None else reward
        self.task_id: str | None = None
        self.seed: int | None = None
        self.start: Mapping[str, Any] = {}
        self._turns: list[Turn] = []
        self._credits: list[float] = []
        self._tally: Tally | None = None
        self.end: End | None = None
        self.first_success: int | None = None
        """The first turn (counted from 1) after which the task was solved."""

    # ------------------------------------------------------------------ filling
    def begin(
        self,
        info: Mapping[str, Any],
        *,
        task_id: str | None = None,
        seed: int | None = None,
        reward: Reward | None = None,
    ) -> None:
        """A new episode whose reset returned ``info`` (everything before is forgotten);
        ``reward``: score this episode with another reward (a row's own)."""
        if reward is not None:
            self.reward = reward
        self.start = info
        self.task_id = task_id if task_id is not None else info.get("task_id")
        self.seed = seed
        self._turns = []
        self._credits = []
        self._tally = self.reward.tally(info)
        self.end = None
        self.first_success = None

    def add(
        self, reward: SupportsFloat, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> float:
        """One env turn as ``step`` returned it (Gymnasium's order: ``log.add(*env.step(a)[1:])``);
        returns the turn's credit under the reward."""
        turn = Turn(float(reward), info, bool(terminated), bool(truncated))
        if self._tally is None:  # stepped without begin: score from this turn's budget on
            self._tally = self.reward.tally(info)
        credit = self._tally.add(turn)
        self._turns.append(turn)
        self._credits.append(credit)
        if self.first_success is None and info.get("success"):
            self.first_success = len(self._turns)
        if self.end is None:
            self.end = env_end(turn.terminated, turn.truncated, info)
        return credit

    def stop(self, reason: str) -> None:
        """The agent or the framework ended the episode (a name of :data:`ENDS`); an episode
        the env already ended keeps that end."""
        if reason not in ENDS:
            raise ValueError(f"an episode's end is one of {sorted(ENDS)}, got {reason!r:.100}")
        if self.end is None:
            self.end = ENDS[reason]

    # ------------------------------------------------------------------ reading
    @property
    def turns(self) -> tuple[Turn, ...]:
        return tuple(self._turns)

    @property
    def episode(self) -> Episode:
        """The episode as rewards read it (:mod:`multiturn_envs.rewards`)."""
        return Episode(self.start, tuple(self._turns))

    @property
    def infos(self) -> list[Mapping[str, Any]]:
        """The reset ``info`` and each turn's."""
        return [self.start, *(t.info for t in self._turns)]

    @property
    def success(self) -> bool:
        """Whether the task is solved after the last turn (at reset, before any)."""
        last = self._turns[-1].info if self._turns else self.start
        return bool(last.get("success", False))

    @property
    def done(self) -> bool:
        """Whether the env ended the episode (success, a terminal state, its budget)."""
        return self.end is not None and self.end.by == "env"

    @property
    def ended(self) -> bool:
        """Whether the episode ended at all (the env, the agent or the framework)."""
        return self.end is not None

    @property
    def truncated(self) -> bool:
        """Whether the episode was cut short: the env truncated its last turn (a spent
        budget, solved or not), or the framework ended it at a cap."""
        if self._turns and self._turns[-1].truncated:
            return True
        return self.end is not None and self.end.truncated

    @property
    def rewards(self) -> list[float]:
        """The env's reward of each turn (their sum is :attr:`env_return`)."""
        return [t.reward for t in self._turns]

    @property
    def env_return(self) -> float:
        return float(sum(t.reward for t in self._turns))

    @property
    def step_scores(self) -> list[float | None]:
        """The oracle's score of each turn (``None`` for a turn without one)."""
        scores: list[float | None] = []
        for turn in self._turns:
            score = turn.info.get("step_score")
            scores.append(None if score is None else float(score))
        return scores

    @property
    def mean_step_score(self) -> float:
        """The mean of the scored turns' step scores (0.0 before any): the registry's
        ``mean_step_score``."""
        return MeanStepScore().score(self.episode)

    @property
    def credits(self) -> list[float]:
        """Each turn's credit under :attr:`reward`, as :meth:`add` returned it."""
        return list(self._credits)

    @property
    def score(self) -> float:
        """The episode's score under :attr:`reward` (streamed: equal to
        ``reward.score(log.episode)``)."""
        if self._tally is None:
            return self.reward.score(self.episode)
        return self._tally.score

    def summary(self) -> dict[str, Any]:
        """The episode in a JSON-able dict: which, how long, how it ended, what it earned."""
        return {
            "task_id": self.task_id,
            "seed": self.seed,
            "turns": len(self._turns),
            "success": self.success,
            "first_success_turn": self.first_success,
            "end": None if self.end is None else self.end.name,
            "truncated": self.truncated,
            "return": self.env_return,
            "reward": self.reward.spec(),
            "score": self.score,
            "mean_step_score": self.mean_step_score,
            "step_scores": self.step_scores,
        }
