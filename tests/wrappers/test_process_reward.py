from __future__ import annotations

import gymnasium as gym

from multiturn_envs.testing import GuessEnv
from multiturn_envs.wrappers import ProcessReward


def test_reward_is_outcome_plus_weighted_score() -> None:
    env = ProcessReward(GuessEnv(), step_weight=0.5, outcome_weight=2.0, baseline=0.25)
    env.reset(options={"task_id": "secret-3"})
    _, reward, _, _, info = env.step("guess 7")  # worst case keeps 8 of 16: score 0.5
    assert info["step_score"] == 0.5
    assert info["process_reward"] == 0.5 * (0.5 - 0.25)
    assert reward == 2.0 * 0.0 + 0.125
    _, reward, terminated, _, info = env.step("guess 3")
    assert terminated and reward == 2.0 * 1.0 + 0.5 * 0.75


def test_spec_round_trip() -> None:
    gym.register("MTTest/GuessPR-v0", entry_point=GuessEnv, max_episode_steps=None)
    try:
        env = ProcessReward(gym.make("MTTest/GuessPR-v0"), step_weight=0.3)
        rebuilt = gym.make(env.spec)
        assert rebuilt.get_wrapper_attr("step_weight") == 0.3
    finally:
        del gym.registry["MTTest/GuessPR-v0"]
