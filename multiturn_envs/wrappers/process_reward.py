"""ProcessReward: add the oracle's step score to the env's (outcome) reward, every step.

Every MT/* env reports ``info["step_score"]`` in [0, 1], the oracle's judgement of the action
just taken, so a dense reward is one wrapper away::

    reward' = outcome_weight * reward + step_weight * (step_score - baseline)

That is the registry's ``shaped`` reward (:class:`multiturn_envs.rewards.Shaped`), which this
wrapper computes; despite the wrapper's name it is *not* the study's process reward as we train
with it (``process``: credits with no pay for unparsable replies or lost states, normalised per
episode), which :class:`~multiturn_envs.wrappers.TurnReward` gives per step
(``TurnReward(env, "process")``). ``baseline`` centres the bonus (0.5 makes poor actions cost
reward instead of just earning less); the parts are kept in ``info["outcome_reward"]`` and
``info["process_reward"]`` so training logs can tell them apart.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from multiturn_envs.rewards import Shaped, Turn


class ProcessReward(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Shape the reward with the oracle's per-step score (the registry's ``shaped`` reward).

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
        self.reward = Shaped(weight=step_weight, outcome_weight=outcome_weight, baseline=baseline)
        self.step_weight = self.reward.weight
        self.outcome_weight = self.reward.outcome_weight
        self.baseline = self.reward.baseline

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        turn = Turn(float(reward), info, terminated, truncated)
        info["outcome_reward"] = float(reward)
        info["process_reward"] = self.reward.bonus(turn)
        return obs, self.reward.credit(turn), terminated, truncated, info
