from __future__ import annotations

import gymnasium as gym
import pytest

from multiturn_envs.testing import GuessEnv
from multiturn_envs.wrappers import ProcessReward, TurnReward


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


def test_process_reward_wrapper_is_the_registrys_shaped_reward() -> None:
    from multiturn_envs.rewards import Episode, Shaped, Turn

    env = ProcessReward(GuessEnv(), step_weight=0.5, outcome_weight=2.0, baseline=0.25)
    _, start = env.reset(options={"task_id": "secret-3"})
    shaped = Shaped(weight=0.5, outcome_weight=2.0, baseline=0.25)
    paid, turns = [], []
    for action in ("guess 7", "nonsense", "guess 3"):
        _, reward, terminated, truncated, info = env.step(action)
        paid.append(reward)
        turns.append(Turn(info["outcome_reward"], info, terminated, truncated))
    assert paid == shaped.credits(Episode(start, tuple(turns)))


def test_turn_reward_pays_a_registered_reward_per_step() -> None:
    from multiturn_envs.rewards import Episode, Process, Turn

    env = TurnReward(GuessEnv(max_turns=4), "process", weight=0.5)
    _, start = env.reset(options={"task_id": "secret-12"})
    paid, turns = [], []
    for action in ("guess 7", "guess 12"):
        _, reward, terminated, truncated, info = env.step(action)
        paid.append(reward)
        turns.append(Turn(info["env_reward"], info, terminated, truncated))
    episode = Episode(start, tuple(turns))
    assert paid == Process(weight=0.5).credits(episode)
    assert sum(paid) == pytest.approx(1.0 + 0.5 * 1.5 / 2) and env.score == sum(paid)


def test_turn_reward_spec_round_trip() -> None:
    gym.register("MTTest/GuessTR-v0", entry_point=GuessEnv, max_episode_steps=None)
    try:
        env = TurnReward(gym.make("MTTest/GuessTR-v0"), "shaped", weight=0.3)
        rebuilt = gym.make(env.spec)
        assert rebuilt.get_wrapper_attr("reward").spec() == {
            "name": "shaped",
            "weight": 0.3,
            "outcome_weight": 1.0,
            "baseline": 0.0,
        }
    finally:
        del gym.registry["MTTest/GuessTR-v0"]
    with pytest.raises(ValueError, match="reward must be one of"):
        TurnReward(GuessEnv(), "best")
