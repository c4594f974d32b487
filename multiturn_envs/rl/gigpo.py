"""GiGPO-style two-level advantages (Feng et al., arXiv 2505.10978).

Critic-free: within one *task group* (the N trajectories sampled for one task),

* the **episode advantage** of a trajectory is its return normalised over the group (GRPO);
* the **step advantage** of step t is its discounted return-to-go ``G_t = sum_k gamma^k r_{t+k}``
  normalised within its *anchor group*: all steps of the group's trajectories taken from an
  identical state (``info["state_key"]`` of our envs is an exact anchor; the original uses the
  observation text). A step whose anchor occurs once gets step advantage 0;
* the advantage of a step is ``A = A_episode + step_weight * A_step``.

``mode="mean_norm"`` subtracts the group mean; ``"mean_std_norm"`` also divides by the group's
standard deviation (population std, plus ``eps``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "StepAdvantages",
    "Trajectory",
    "discounted_returns",
    "gigpo_advantages",
]


@dataclass(frozen=True)
class Trajectory:
    """One trajectory of a task group: the anchor key and reward of each step.

    ``episode_return`` defaults to the sum of ``rewards``.
    """

    anchors: Sequence[str]
    rewards: Sequence[float]
    episode_return: float | None = None

    def __post_init__(self) -> None:
        if len(self.anchors) != len(self.rewards):
            raise ValueError("a trajectory needs one anchor per reward")

    @property
    def total(self) -> float:
        return float(sum(self.rewards)) if self.episode_return is None else self.episode_return


@dataclass(frozen=True)
class StepAdvantages:
    """Per-trajectory arrays: episode part, step part, and their weighted sum."""

    episode: list[float]
    step: list[np.ndarray]
    combined: list[np.ndarray]


_MODES = ("mean_norm", "mean_std_norm")


def _normalise(values: np.ndarray, mode: str, eps: float) -> np.ndarray:
    centred: np.ndarray = values - values.mean()
    if mode == "mean_norm":
        return centred
    if mode == "mean_std_norm":
        scaled: np.ndarray = centred / (values.std() + eps)
        return scaled
    raise ValueError(f"mode must be 'mean_norm' or 'mean_std_norm', got {mode!r}")


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}``, computed backwards."""
    out = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def gigpo_advantages(
    group: Sequence[Trajectory],
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    episode_mode: str = "mean_std_norm",
    step_mode: str = "mean_norm",
    eps: float = 1e-6,
) -> StepAdvantages:
    """Two-level advantages for one task group (all trajectories of one task and start)."""
    if not group:
        raise ValueError("a task group needs at least one trajectory")
    for mode in (episode_mode, step_mode):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    episode = _normalise(np.array([t.total for t in group], dtype=float), episode_mode, eps)
    returns = [discounted_returns(t.rewards, gamma) for t in group]
    members: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, traj in enumerate(group):
        for t, key in enumerate(traj.anchors):
            members[key].append((i, t))
    step = [np.zeros(len(t.rewards)) for t in group]
    for places in members.values():
        if len(places) < 2:
            continue
        values = np.array([returns[i][t] for i, t in places])
        for (i, t), adv in zip(places, _normalise(values, step_mode, eps)):
            step[i][t] = adv
    combined = [episode[i] + step_weight * step[i] for i in range(len(group))]
    return StepAdvantages(episode=[float(e) for e in episode], step=step, combined=combined)
