"""The base class contract, on the toy GuessEnv of conftest.py."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.core import EpisodeOver
from multiturn_envs.testing import GuessEnv


def test_step_before_reset_raises(guess_env: GuessEnv) -> None:
    with pytest.raises(gym.error.ResetNeeded):
        guess_env.step("guess 3")


def test_success_terminates_and_stepping_after_raises(guess_env: GuessEnv) -> None:
    guess_env.reset(options={"task_id": "secret-5"})
    _, reward, terminated, truncated, info = guess_env.step("guess 5")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    with pytest.raises(EpisodeOver):
        guess_env.step("guess 5")


def test_budget_truncates_not_terminates(guess_env: GuessEnv) -> None:
    guess_env.reset(options={"task_id": "secret-9", "max_turns": 3})
    flags = [guess_env.step("guess 0")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    assert guess_env.turns_left == 0


def test_success_on_last_turn_is_terminated_not_truncated(guess_env: GuessEnv) -> None:
    guess_env.reset(options={"task_id": "secret-9", "max_turns": 2})
    guess_env.step("guess 0")
    _, _, terminated, truncated, info = guess_env.step("guess 9")
    assert terminated and not truncated and info["truncation_reason"] is None


def test_announced_budget_is_in_observations_and_hidden_is_not() -> None:
    env = GuessEnv(max_turns=4, budget_mode="announced")
    obs, info = env.reset(options={"task_id": "secret-1"})
    assert obs.endswith("[Turns left: 4 of 4]") and info["budget_mode"] == "announced"
    obs, *_ = env.step("guess 0")
    assert obs.endswith("[Turns left: 3 of 4]")
    hidden = GuessEnv(max_turns=4)
    obs, _ = hidden.reset(options={"task_id": "secret-1"})
    assert "Turns left" not in obs and "4" not in obs


def test_non_string_action_is_a_type_error(guess_env: GuessEnv) -> None:
    guess_env.reset()
    with pytest.raises(TypeError, match="an action is a str"):
        guess_env.step(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3"])
def test_bad_budget_is_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        GuessEnv(max_turns=bad)  # type: ignore[arg-type]


def test_announced_without_budget_is_rejected() -> None:
    with pytest.raises(ValueError, match="announced"):
        GuessEnv(max_turns=None, budget_mode="announced")


@given(st.integers(0, 2**31 - 1), st.lists(st.sampled_from(range(16)), max_size=8))
def test_snapshot_restores_exactly(seed: int, guesses: list[int]) -> None:
    env = GuessEnv(max_turns=10)
    env.reset(seed=seed)
    snap = copy.deepcopy(env.get_state())
    first = []
    for g in guesses:
        if env.done:
            break
        first.append(env.step(f"guess {g}"))
    env.set_state(snap)
    second = [env.step(f"guess {g}") for g in guesses[: len(first)]]
    assert first == second


def test_score_action_leaves_state_alone(guess_env: GuessEnv) -> None:
    guess_env.reset(options={"task_id": "secret-12"})
    before = guess_env.get_state()
    assert guess_env.score_action("guess 12") == 1.0
    assert guess_env.get_state() == before


def test_play_prefix_does_not_count_and_refuses_to_end(guess_env: GuessEnv) -> None:
    guess_env.reset(options={"task_id": "secret-12", "max_turns": 3})
    guess_env.play_prefix("guess 1")
    assert guess_env.turn == 0 and guess_env.turns_left == 3
    assert guess_env.current_info()["prefix_turns"] == 1
    with pytest.raises(ValueError, match="ends the episode"):
        guess_env.play_prefix("guess 12")
    assert not guess_env.done and len(guess_env.messages()) == 3


def test_reset_clears_history(guess_env: GuessEnv) -> None:
    guess_env.reset(options={"task_id": "secret-3"})
    guess_env.step("guess 1")
    guess_env.reset(options={"task_id": "secret-3"})
    assert len(guess_env.messages()) == 1


def test_seed_fixes_the_task() -> None:
    picks = {GuessEnv().reset(seed=11)[1]["task_id"] for _ in range(5)}
    assert len(picks) == 1
    spread = {GuessEnv().reset(seed=s)[1]["task_id"] for s in range(40)}
    assert len(spread) > 5


class _CountingEnv(GuessEnv):
    """Counts how often its resources are released."""

    def __init__(self) -> None:
        super().__init__()
        self.releases = 0

    def _close(self) -> None:
        self.releases += 1


def test_close_is_idempotent() -> None:
    env = _CountingEnv()
    env.reset(seed=0)
    env.close()
    env.close()
    assert env.releases == 1  # the env's resources are released exactly once
    fresh = _CountingEnv()
    fresh.close()  # closing an env that was never reset is fine too
    assert fresh.releases == 1


def test_unknown_reset_options_are_dropped_with_a_warning(guess_env: GuessEnv) -> None:
    with pytest.warns(UserWarning, match=r"ignores unknown options \['colour'\]"):
        _, info = guess_env.reset(seed=1, options={"task_id": "secret-2", "colour": "red"})
    assert info["task_id"] == "secret-2"
