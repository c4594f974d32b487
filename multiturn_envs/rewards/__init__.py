"""Rewards: one registry of small named objects that every consumer reads (docs/rewards.md).

A reward gives an episode's per-turn credits and its scalar score from what the env returned
(the reset ``info``, then each turn's reward and ``info``), so a wrapper, the trainer, the
TRL/verl/verifiers/SkyRL adapters and the server all compute one definition::

    from multiturn_envs.rewards import Episode, Turn, make_reward

    reward = make_reward("process", weight=0.5)
    episode = Episode(reset_info, tuple(Turn(r, info) for r, info in steps))
    reward.score(episode)      # the episode's scalar (TRL, GRPO, verl reward_score)
    reward.credits(episode)    # one credit per turn, summing to the score (GiGPO, SkyRL, ...)
    tally = reward.tally(reset_info); tally.add(Turn(r, info))   # the same, turn by turn

Names: ``outcome``, ``success``, ``process`` (THE process reward), ``step_credit``, ``shaped``,
``mean_step_score``. Add one by subclassing :class:`PerTurnReward` or :class:`EpisodeReward`
with a ``name=`` (docs/rewards.md says how).
"""

from typing import Any

from multiturn_envs.deprecation import renamed_attribute

# The public names of these modules (their ``__all__``) are this package's.
from multiturn_envs.rewards import base, episode, outcome, process, registry, step_score
from multiturn_envs.rewards.base import *  # noqa: F403
from multiturn_envs.rewards.episode import *  # noqa: F403
from multiturn_envs.rewards.outcome import *  # noqa: F403
from multiturn_envs.rewards.process import *  # noqa: F403
from multiturn_envs.rewards.registry import *  # noqa: F403
from multiturn_envs.rewards.step_score import *  # noqa: F403

__all__: list[str] = []
__all__ += base.__all__
__all__ += episode.__all__
__all__ += outcome.__all__
__all__ += process.__all__
__all__ += registry.__all__
__all__ += step_score.__all__


def __getattr__(name: str) -> Any:
    """Old names, read for one release (:mod:`multiturn_envs.deprecation`)."""
    return renamed_attribute(__name__, name, {"Progress": process.ProcessState})
