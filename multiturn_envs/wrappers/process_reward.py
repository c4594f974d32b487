"""ProcessReward: add the oracle's step score to the env's (outcome) reward.

The study asks whether an exact process reward helps (it does on FrozenLake, not on BFCL). Every
MT/* env reports ``info["step_score"]`` in [0, 1], the oracle's judgement of the action just
taken, so a dense reward is one wrapper away::

    reward' = outcome_weight * reward + step_weight * (step_score - baseline)

``baseline`` centres the bonus (0.5 makes poor actions cost reward instead of just earning
less); the parts are kept in ``info["outcome_reward"]`` and ``info["process_reward"]`` so
training logs can tell them apart.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class ProcessReward(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Shape the reward with the oracle's per-step score.

    Args:
        env: any MT/* env.
        step_weight: weight of the step score.
        outcome_weight: weight of the env's own reward.
        baseline: subtracted from the step score before weighting.
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        step_weight: float = 0.1,
        outcome_weight: float = 1.0,
        baseline: float = 0.0,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, step_weight=step_weight, outcome_weight=outcome_weight, baseline=baseline
        )
        gym.Wrapper.__init__(self, env)
        self.step_weight = float(step_weight)
        self.outcome_weight = float(outcome_weight)
        self.baseline = float(baseline)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        process = self.step_weight * (float(info["step_score"]) - self.baseline)
        info["outcome_reward"] = float(reward)
        info["process_reward"] = process
        return obs, self.outcome_weight * float(reward) + process, terminated, truncated, info
