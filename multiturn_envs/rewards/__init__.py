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

from multiturn_envs.rewards.base import (
    EpisodeReward,
    PerTurnReward,
    Reward,
    Tally,
    check_number,
    registered_rewards,
)
from multiturn_envs.rewards.episode import INFO_KEYS, Episode, Turn, slim_info
from multiturn_envs.rewards.outcome import Outcome, Success
from multiturn_envs.rewards.process import (
    DEFAULT_WEIGHT,
    Process,
    Progress,
    StepCredit,
    process_score,
    step_credit,
)
from multiturn_envs.rewards.registry import (
    BUILT_IN,
    RewardSpec,
    make_reward,
    reward_class,
    reward_names,
    reward_params,
)
from multiturn_envs.rewards.step_score import MeanStepScore, Shaped

__all__ = [
    "BUILT_IN",
    "DEFAULT_WEIGHT",
    "INFO_KEYS",
    "Episode",
    "EpisodeReward",
    "MeanStepScore",
    "Outcome",
    "PerTurnReward",
    "Process",
    "Progress",
    "Reward",
    "RewardSpec",
    "Shaped",
    "StepCredit",
    "Success",
    "Tally",
    "Turn",
    "check_number",
    "make_reward",
    "process_score",
    "registered_rewards",
    "reward_class",
    "reward_names",
    "reward_params",
    "slim_info",
    "step_credit",
]
