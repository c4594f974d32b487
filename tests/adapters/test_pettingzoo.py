"""PettingZoo adapters pass PettingZoo's own tests, on the toy env and every registered env."""

from __future__ import annotations

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import multiturn_envs
from multiturn_envs.adapters.pettingzoo import HeadToHeadEnv, aec_env, parallel_env
from multiturn_envs.testing import GuessEnv

ENV_IDS = multiturn_envs.env_ids()


def _toy() -> GuessEnv:
    return GuessEnv(max_turns=6)


def test_toy_passes_all_three_tests() -> None:
    api_test(aec_env(_toy()), num_cycles=50)
    parallel_api_test(parallel_env(_toy()), num_cycles=50)
    seed_test(lambda: aec_env(_toy()), num_cycles=20)
    parallel_seed_test(lambda: parallel_env(_toy()), num_cycles=20)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_registered_env_passes(env_id: str) -> None:
    api_test(aec_env(env_id, max_turns=4), num_cycles=8)
    parallel_api_test(parallel_env(env_id, max_turns=4), num_cycles=8)
    seed_test(lambda: aec_env(env_id, max_turns=4), num_cycles=4)


def test_parallel_episode_matches_the_gym_env() -> None:
    env = parallel_env(_toy())
    obs, _ = env.reset(seed=4, options={"task_id": "secret-9"})
    assert obs == {"agent_0": {"text": "Guess my number in [0, 15]. Reply 'guess N'."}}
    _, rewards, terms, _, _ = env.step({"agent_0": "guess 9"})
    assert rewards == {"agent_0": 1.0} and terms == {"agent_0": True} and env.agents == []


def test_head_to_head_judges_by_the_oracle() -> None:
    env = HeadToHeadEnv(_toy())
    env.reset(seed=0, options={"task_id": "secret-12"})
    # guess 7 eliminates half in the worst case (0.5); guess 1 keeps 14 of 16 (0.125).
    _, rewards, _, _, infos = env.step({"player_0": "guess 1", "player_1": "guess 7"})
    assert rewards == {"player_0": -1.0, "player_1": 1.0}
    assert infos["player_0"]["played"] == "player_1"
    assert infos["player_0"]["scores"] == {"player_0": 0.125, "player_1": 0.5}
    _, rewards, terms, _, _ = env.step({"player_0": "guess 12", "player_1": "guess 12"})
    assert rewards == {"player_0": 0.0, "player_1": 0.0} and all(terms.values())


def test_head_to_head_passes_pettingzoo_tests() -> None:
    parallel_api_test(HeadToHeadEnv(_toy()), num_cycles=30)
    parallel_seed_test(lambda: HeadToHeadEnv(_toy()), num_cycles=20)
