"""What a reward reads: an :class:`Episode` (the reset ``info`` and each :class:`Turn` taken).

Rewards are computed from what the env already returns, so every consumer (a wrapper, the
trainer, an adapter, the server) can build an episode from its own loop: the reset ``info``,
then per ``step`` the env's reward, ``info``, ``terminated`` and ``truncated``. The ``info``
keys the built-in rewards read are :data:`INFO_KEYS` (the env contract's); :func:`slim_info`
keeps only those, for consumers that store episodes (a verifiers trace).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

INFO_KEYS: tuple[str, ...] = (
    "success",
    "step_score",
    "parse_error",
    "state_value",
    "max_turns",
    "turns_left",
)
"""The ``info`` keys the built-in rewards read (``max_turns`` of the reset ``info``)."""


def slim_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``info`` rewards read (:data:`INFO_KEYS`), e.g. to store it in a trace."""
    return {k: info[k] for k in INFO_KEYS if k in info}


@dataclass(frozen=True)
class Turn:
    """One turn as the env returned it: its reward, ``info`` and end flags."""

    reward: float
    info: Mapping[str, Any]
    terminated: bool = False
    truncated: bool = False


@dataclass(frozen=True)
class Episode:
    """An episode so far (finished or not): the reset ``info`` and the turns taken.

    Attributes:
        start: the ``info`` ``reset`` returned (its ``max_turns`` is the episode's budget).
        turns: one :class:`Turn` per ``step``.
    """

    start: Mapping[str, Any]
    turns: tuple[Turn, ...] = ()

    @classmethod
    def of(
        cls,
        start: Mapping[str, Any],
        rewards: Sequence[float],
        infos: Sequence[Mapping[str, Any]],
        *,
        done: bool = False,
    ) -> Episode:
        """An episode from parallel lists of per-turn rewards and infos (``done``: the last
        turn ended it; which flag is then read from ``info["truncation_reason"]``)."""
        if len(rewards) != len(infos):
            raise ValueError(f"{len(rewards)} rewards for {len(infos)} infos: one per turn")
        turns = []
        for t, (reward, info) in enumerate(zip(rewards, infos)):
            last = done and t == len(infos) - 1
            truncated = last and info.get("truncation_reason") is not None
            turns.append(Turn(float(reward), info, last and not truncated, truncated))
        return cls(start, tuple(turns))

    @property
    def budget(self) -> int | None:
        """The episode's turn budget (``None``: none)."""
        budget = self.start.get("max_turns")
        return None if budget is None else int(budget)

    @property
    def success(self) -> bool:
        """Whether the task is solved after the last turn (at reset, before any)."""
        last = self.turns[-1].info if self.turns else self.start
        return bool(last.get("success", False))

    @property
    def done(self) -> bool:
        """Whether the last turn ended the episode."""
        return bool(self.turns) and (self.turns[-1].terminated or self.turns[-1].truncated)
