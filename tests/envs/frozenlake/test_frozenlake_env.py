"""FrozenLake-text: the env contract, observations, episode ends, snapshots, oracle hooks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import multiturn_envs
from multiturn_envs.envs.frozenlake.env import DEFAULT_TASKS, FrozenLakeTextEnv
from multiturn_envs.testing import check_text_env


@pytest.mark.parametrize("is_slippery", [True, False])
def test_conformance(is_slippery: bool) -> None:
    check_text_env(
        lambda: FrozenLakeTextEnv(max_turns=6, is_slippery=is_slippery),
        task_ids=["4x4", "8x8", DEFAULT_TASKS[3]],
    )


def test_conformance_through_gym_make() -> None:
    check_text_env(lambda: gym.make("MT/FrozenLake-v0", max_turns=5))


def test_gymnasium_check_env() -> None:
    # through make, so that check_env also re-makes the env for the ansi render mode
    check_env(gym.make("MT/FrozenLake-v0", max_turns=8, render_mode="ansi").unwrapped)


def test_make_truncates_at_budget() -> None:
    assert "MT/FrozenLake-v0" in multiturn_envs.env_ids()
    env = gym.make("MT/FrozenLake-v0", max_turns=8)
    env.reset(seed=0, options={"task_id": "4x4"})
    flags = []
    for _ in range(8):
        # Unparseable replies spend turns without moving: only the budget can end this.
        _, _, terminated, truncated, info = env.step("gibberish")
        flags.append((terminated, truncated))
    assert flags[:-1] == [(False, False)] * 7 and flags[-1] == (False, True)
    assert info["truncation_reason"] == "turn_budget" and info["turns_left"] == 0
    with pytest.raises(gym.error.ResetNeeded):
        env.step("Left")


def test_observation_has_grid_legend_position_and_event() -> None:
    env = FrozenLakeTextEnv(is_slippery=False, separator=" ")
    obs, info = env.reset(seed=0, options={"task_id": "4x4"})
    assert "P _ _ _\n_ O _ O\n_ _ _ O\nO _ _ G" in obs
    assert "Legend:" in obs and "row 0, column 0" in obs
    assert info["state_key"] == "4x4:0"
    obs, _, _, _, info = env.step("I will go <answer>Right</answer>")
    assert obs.startswith("You moved Right to row 0, column 1.")
    assert info["event"] == "moved" and info["cell"] == 1 and info["state_key"] == "4x4:1"
    obs, _, _, _, info = env.step("Up")
    assert "bumped into the edge" in obs and info["event"] == "bumped_wall" and info["cell"] == 1
    obs, _, _, _, info = env.step("Left and Right")
    assert info["parse_error"] and info["event"] == "parse_error" and info["cell"] == 1
    assert "more than one move" in obs and "You did not move" in obs
    obs, reward, terminated, _, info = env.step("down")
    assert terminated and reward == 0.0 and not info["success"]
    assert info["event"] == "fell_in_hole" and "X" in obs and "fell into a hole" in obs


def test_compact_observation_is_the_grid_alone() -> None:
    env = FrozenLakeTextEnv(is_slippery=False, separator=" ", observation="compact")
    obs, info = env.reset(seed=0, options={"task_id": "4x4"})
    rules, grid = obs.split("\n\n")
    assert "frozen lake of 4 rows" in rules and "\nLegend: P = you, _ = frozen ice" in rules
    assert grid == "P _ _ _\n_ O _ O\n_ _ _ O\nO _ _ G" and "row 0" not in obs
    obs, _, _, _, info = env.step("Right")
    assert obs == "_ P _ _\n_ O _ O\n_ _ _ O\nO _ _ G" and info["event"] == "moved"
    obs, _, _, _, info = env.step("Up")
    assert obs == "_ P _ _\n_ O _ O\n_ _ _ O\nO _ _ G" and info["event"] == "bumped_wall"
    obs, _, _, _, info = env.step("Left and Right")
    assert info["parse_error"] and obs.endswith("You did not move.\n" + grid.replace("P _", "_ P"))
    assert "more than one move" in obs
    obs, _, terminated, _, info = env.step("down")
    assert terminated and obs == "_ _ _ _\n_ X _ O\n_ _ _ O\nO _ _ G"
    with pytest.raises(ValueError, match="observation must be one of"):
        FrozenLakeTextEnv(observation="terse")


def test_reaching_the_goal_is_success() -> None:
    env = FrozenLakeTextEnv(is_slippery=False)
    env.reset(seed=0, options={"task_id": "4x4"})
    for move in ["Down", "Down", "Right", "Right", "Down"]:
        _, reward, terminated, truncated, info = env.step(move)
        assert not terminated
    _, reward, terminated, truncated, info = env.step("Right")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["event"] == "reached_goal" and "√" in env.current_observation()


def test_unparseable_turn_draws_no_random_number() -> None:
    env = FrozenLakeTextEnv()
    env.reset(seed=3, options={"task_id": "8x8"})
    before = env.np_random.bit_generator.state
    _, _, _, _, info = env.step("I am not sure what to do.")
    assert info["parse_error"] and env.np_random.bit_generator.state == before
    env.step("Down")
    assert env.np_random.bit_generator.state != before


def test_snapshot_restores_position_event_and_rng() -> None:
    env = FrozenLakeTextEnv(max_turns=20)
    env.reset(seed=5, options={"task_id": "8x8"})
    env.step("Right")
    snapshot = env.get_state()
    first = [env.step(m) for m in ["Down", "Right", "Down"] if not env.done]
    env.set_state(snapshot)
    again = [env.step(m) for m in ["Down", "Right", "Down"][: len(first)]]
    assert [s[:4] for s in first] == [s[:4] for s in again]
    other = FrozenLakeTextEnv(max_turns=20)
    other.reset(seed=0, options={"task_id": "4x4"})
    other.set_state(snapshot)
    assert other.cell == snapshot["env"]["cell"] and other.desc == env.desc


def test_task_ids_and_bad_input() -> None:
    env = FrozenLakeTextEnv(tasks=["4x4", "random-s5-p0.7-n2", "map:SF/HG"])
    assert list(env.task_ids()) == ["4x4", "random-s5-p0.7-n2", "map:SF/HG"]
    _, info = env.reset(seed=0)
    assert info["task_id"] in env.task_ids()
    env.reset(seed=0, options={"task_id": "map:SFF/FHF/FFG"})
    assert env.desc == ("SFF", "FHF", "FFG")
    for bad in ["5x5", "random-s1-p0.8-n0", "map:SX/FG", "map:SF/F"]:
        with pytest.raises(ValueError):
            env.reset(seed=0, options={"task_id": bad})
    with pytest.raises(ValueError):
        FrozenLakeTextEnv(tasks=["nope"])
    with pytest.raises(ValueError):
        FrozenLakeTextEnv(glyphs={"wall": "#"})
    with pytest.warns(UserWarning, match="ignores unknown options"):
        env.reset(seed=0, options={"task_id": "4x4", "size": 4})


def test_expert_beats_error_and_error_never_ends_episode() -> None:
    # 14 moves is the shortest path on the 8x8 map: with a budget of exactly 14, every move
    # that is not on a shortest path is strictly worse than the expert's.
    env = FrozenLakeTextEnv(max_turns=14, is_slippery=False)
    env.reset(seed=0, options={"task_id": "8x8"})
    rng = np.random.default_rng(0)
    error = env.error_action(rng)
    assert env.score_action(error) == 0.0 < env.score_action(env.expert_action()) == 1.0
    for _ in range(10):
        _, _, terminated, _, _ = env.step(env.error_action(rng))
        assert not terminated
    env.reset(seed=0, options={"task_id": "8x8"})
    info = {}
    while not env.done:
        _, _, _, _, info = env.step(env.expert_action())
        assert info["step_score"] == 1.0
    assert info["success"] and info["turn"] == 14
