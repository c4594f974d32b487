"""TurnReward: any registered reward as the reward of every step (``TurnReward(env, "process")``).

Each step returns the credit the reward gives that turn (:class:`multiturn_envs.rewards.Reward`,
kept as a running :class:`~multiturn_envs.rewards.Tally` from the reset ``info`` on, O(1) a
step), so the step rewards of an episode sum to the reward's score of it: a Gymnasium learner
gets the same definition the trainer and the adapters use. The env's own reward stays in
``info["env_reward"]``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from multiturn_envs.rewards import Reward, Tally, Turn, make_reward
from multiturn_envs.wrappers.turn_budget import text_env_of


class TurnReward(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Reward each step with a registered reward's credit for that turn.

    Args:
        env: any MT/* env.
        reward: a reward name (``"process"``, ``"success"``, ...: docs/rewards.md) or object.
        **params: the named reward's parameters (e.g. ``weight=0.5``).
    """

    def __init__(self, env: gym.Env[str, str], reward: str | Reward = "process", **params: Any):
        self.reward = make_reward(reward, **params)
        gym.utils.RecordConstructorArgs.__init__(self, reward=self.reward.spec())
        gym.Wrapper.__init__(self, env)
        text_env_of(env)
        self._tally: Tally | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self._tally = self.reward.tally(info)
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._tally is None:  # the env stepped without our reset: start from its state
            self._tally = self.reward.tally(text_env_of(self.env).current_info())
        credit = self._tally.add(Turn(float(reward), info, terminated, truncated))
        info["env_reward"] = float(reward)
        return obs, credit, terminated, truncated, info

    @property
    def score(self) -> float:
        """The reward's score of the episode so far (the sum of the step rewards)."""
        return 0.0 if self._tally is None else self._tally.score
