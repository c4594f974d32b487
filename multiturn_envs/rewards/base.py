"""The reward protocol: :class:`Reward` (a named, parameterised object) and its :class:`Tally`.

A reward turns an :class:`~multiturn_envs.rewards.episode.Episode` into

* its **per-turn credits**, one float per turn taken (:meth:`Reward.credits`), for the
  consumers that train on turns: GiGPO's step returns, verl's per-turn scores, verifiers'
  turn rewards, SkyRL's and OpenEnv's per-step rewards;
* its **score**, the episode's scalar (:meth:`Reward.score`), for those that train on
  episodes: TRL's ``get_reward``, GRPO, verl's ``reward_score``, a verifiers rubric.

The credits always sum to the score minus the score before the first turn (0 for every
built-in reward but ``success`` of an episode already solved at reset), so a turn-level and an
episode-level consumer of one reward agree on what an episode earned. Both come from one
running :class:`Tally`, which is also what a streaming consumer (a wrapper, the server, SkyRL)
feeds turn by turn: each ``add`` costs O(1), so long episodes never cost a quadratic rescan.

Two helpers cover the usual shapes: :class:`PerTurnReward` (a turn's credit depends on that
turn alone; the score is their sum) and :class:`EpisodeReward` (the score is a function of a
running aggregate; a turn's credit is how much it moved the score).

Registration is the subclass itself, as inspect_ai's ``@scorer`` is the function: a subclass
declared with a name, ``class Outcome(PerTurnReward, name="outcome")``, is a registered reward
(:func:`registered_rewards`; :mod:`multiturn_envs.rewards.registry` builds them by name).
There is no registry object to mutate: Python's class hierarchy is the registry.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from multiturn_envs.rewards.episode import Episode, Turn

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class Tally(ABC):
    """One episode's reward, kept as it runs: :meth:`add` each turn, read :attr:`score`."""

    @abstractmethod
    def add(self, turn: Turn) -> float:
        """Fold ``turn`` in; return its credit."""

    @property
    @abstractmethod
    def score(self) -> float:
        """The episode's score so far."""


class Reward(ABC):
    """A named reward: per-turn credits and the episode's score, from what the env returned.

    Subclasses are (frozen) dataclasses whose fields are the reward's parameters, declared with
    their registry name: ``class Process(EpisodeReward[...], name="process")``. Their
    ``__post_init__`` checks the parameters (a ``ValueError`` naming the bad one).
    """

    name: ClassVar[str] = ""
    """The registry name (``""``: not registered, e.g. a helper base class)."""

    def __init_subclass__(cls, *, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is None:
            cls.name = ""
            return
        if not _NAME.match(name):
            raise ValueError(f"a reward's name is a lowercase identifier, got {name!r}")
        for other in _subclasses(Reward):  # type: ignore[type-abstract]
            same = (other.__module__, other.__qualname__) == (cls.__module__, cls.__qualname__)
            if other is not cls and other.name == name and not same:
                raise ValueError(
                    f"reward name {name!r} is taken by {other.__module__}.{other.__qualname__}"
                )
        cls.name = name

    @abstractmethod
    def tally(self, start: Mapping[str, Any]) -> Tally:
        """A fresh running tally for one episode whose reset ``info`` is ``start``."""

    def score(self, episode: Episode) -> float:
        """The episode's scalar (finished or not)."""
        tally = self.tally(episode.start)
        for turn in episode.turns:
            tally.add(turn)
        return tally.score

    def credits(self, episode: Episode) -> list[float]:
        """One credit per turn taken; their sum is :meth:`score` (less the score at reset)."""
        tally = self.tally(episode.start)
        return [tally.add(turn) for turn in episode.turns]

    def params(self) -> dict[str, Any]:
        """The reward's parameters (its dataclass fields), JSON-able."""
        return {name: getattr(self, name) for name in getattr(self, "__dataclass_fields__", {})}

    def spec(self) -> dict[str, Any]:
        """``{"name": ..., **params}``: what :func:`~multiturn_envs.rewards.make_reward` rebuilds
        this reward from (a config file, a served client's reset)."""
        return {"name": self.name, **self.params()}


def _subclasses(cls: type[Reward]) -> Iterator[type[Reward]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def registered_rewards() -> dict[str, type[Reward]]:
    """Every named :class:`Reward` subclass defined so far, by name (a redefinition wins)."""
    return {cls.name: cls for cls in _subclasses(Reward) if cls.name}  # type: ignore[type-abstract]


def check_number(reward: str, name: str, value: Any, *, minimum: float | None = None) -> float:
    """``value`` as a finite float (``>= minimum``), or a ``ValueError`` naming the parameter."""
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if not bad:
        try:
            bad = not math.isfinite(float(value))
        except OverflowError:  # an int beyond any float (JSON allows 10**1000)
            bad = True
    if bad or (minimum is not None and value < minimum):
        at_least = "" if minimum is None else f" >= {minimum:g}"
        raise ValueError(
            f"{reward} reward: {name} must be a finite number{at_least}, got {value!r}"
        )
    return float(value)


class _SumTally(Tally):
    def __init__(self, credit: Callable[[Turn], float]) -> None:
        self._credit = credit
        self._score = 0.0

    def add(self, turn: Turn) -> float:
        credit = self._credit(turn)
        self._score += credit
        return credit

    @property
    def score(self) -> float:
        return self._score


class PerTurnReward(Reward):
    """A reward whose turn credit depends on that turn alone; the score is the credits' sum
    (accumulated from 0.0 in turn order, so it equals Python's ``sum`` bit for bit)."""

    @abstractmethod
    def credit(self, turn: Turn) -> float:
        """What ``turn`` earns."""

    def tally(self, start: Mapping[str, Any]) -> Tally:
        return _SumTally(self.credit)

    def credits(self, episode: Episode) -> list[float]:
        return [self.credit(turn) for turn in episode.turns]


State = TypeVar("State")


class _FoldTally(Tally, Generic[State]):
    def __init__(self, reward: EpisodeReward[State], state: State) -> None:
        self._reward = reward
        self._state = state
        self._score = reward.value(state)

    def add(self, turn: Turn) -> float:
        before = self._score
        self._state = self._reward.fold(self._state, turn)
        self._score = self._reward.value(self._state)
        return self._score - before

    @property
    def score(self) -> float:
        return self._score


class EpisodeReward(Reward, Generic[State]):
    """A reward whose score is a function of the episode so far, kept as a running aggregate
    (``State``); a turn's credit is how much it changed the score."""

    @abstractmethod
    def initial(self, start: Mapping[str, Any]) -> State:
        """The aggregate of an episode with no turn yet (``start``: the reset ``info``)."""

    @abstractmethod
    def fold(self, state: State, turn: Turn) -> State:
        """The aggregate after ``turn``."""

    @abstractmethod
    def value(self, state: State) -> float:
        """The score of an episode whose aggregate is ``state``."""

    def tally(self, start: Mapping[str, Any]) -> Tally:
        return _FoldTally(self, self.initial(start))
