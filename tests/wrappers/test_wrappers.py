"""TurnBudget, BudgetMix and ErrorInjection on the toy env (FrozenLake tests cover real envs)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.testing import GuessEnv, check_text_env
from multiturn_envs.wrappers import BudgetMix, ErrorInjection, TurnBudget


def test_turn_budget_truncates_at_its_budget() -> None:
    env = TurnBudget(GuessEnv(max_turns=None), max_turns=2)
    env.reset(options={"task_id": "secret-7"})
    assert env.step("guess 0")[3] is False
    _, _, terminated, truncated, info = env.step("guess 1")
    assert (terminated, truncated, info["truncation_reason"]) == (False, True, "turn_budget")


def test_turn_budget_announced() -> None:
    env = TurnBudget(GuessEnv(), max_turns=3, mode="announced")
    obs, info = env.reset(options={"task_id": "secret-7"})
    assert "[Turns left: 3 of 3]" in obs and info["budget_mode"] == "announced"


def test_turn_budget_rejects_bad_values_at_construction() -> None:
    with pytest.raises(ValueError):
        TurnBudget(GuessEnv(), max_turns=0)
    with pytest.raises(ValueError):
        TurnBudget(GuessEnv(), max_turns=3, mode="loud")


def test_wrappers_refuse_non_text_envs() -> None:
    with pytest.raises(TypeError, match="not a multiturn_envs TextEnv"):
        TurnBudget(gym.make("CartPole-v1"), max_turns=3)


@given(st.integers(0, 10_000))
def test_budget_mix_is_seeded_and_does_not_shift_env_rng(seed: int) -> None:
    mixed = BudgetMix(GuessEnv(), budgets=[2, 4, 8], weights=[1, 1, 2])
    plain = GuessEnv()
    _, info = mixed.reset(seed=seed)
    _, plain_info = plain.reset(seed=seed)
    assert info["task_id"] == plain_info["task_id"]  # the env's stream is untouched
    assert info["max_turns"] in (2, 4, 8)
    _, again = mixed.reset(seed=seed)
    assert again["max_turns"] == info["max_turns"]


def test_budget_mix_follows_weights() -> None:
    env = BudgetMix(GuessEnv(), budgets=[2, 5], weights=[0.2, 0.8])
    draws = [env.reset(seed=s)[1]["max_turns"] for s in range(400)]
    share = np.mean([d == 5 for d in draws])
    assert 0.7 < share < 0.9


def test_budget_mix_validates() -> None:
    with pytest.raises(ValueError):
        BudgetMix(GuessEnv(), budgets=[])
    with pytest.raises(ValueError):
        BudgetMix(GuessEnv(), budgets=[2, 3], weights=[1.0])


def test_error_injection_hands_over_an_error_state() -> None:
    env = ErrorInjection(GuessEnv(max_turns=4), after_expert_steps=2)
    obs, info = env.reset(seed=3, options={"task_id": "secret-13"})
    base = env.unwrapped
    assert info["prefix_turns"] == 3 and len(info["injected_actions"]) == 3
    assert info["turn"] == 0 and info["turns_left"] == 4
    assert [m["role"] for m in base.messages()] == ["user", "assistant"] * 3 + ["user"]
    assert base.messages()[-1]["content"] == obs
    assert info["error_action"] != "guess 13"
    again = ErrorInjection(GuessEnv(max_turns=4), after_expert_steps=2)
    assert again.reset(seed=3, options={"task_id": "secret-13"})[1] == info


def test_error_injection_reports_too_short_tasks() -> None:
    # Binary search finds 7 at the first expert step: k=1 can never leave a live state.
    env = ErrorInjection(GuessEnv(), after_expert_steps=1, max_tries=3)
    with pytest.raises(RuntimeError, match="smaller after_expert_steps"):
        env.reset(seed=0, options={"task_id": "secret-7"})


def test_wrapped_envs_conform() -> None:
    check_text_env(
        lambda: TurnBudget(ErrorInjection(GuessEnv(), after_expert_steps=1), max_turns=5),
        task_ids=["secret-0", "secret-15"],
    )


def test_spec_rebuilds_wrapper_stack() -> None:
    gym.register("MTTest/Guess-v0", entry_point=GuessEnv, max_episode_steps=None)
    try:
        env = gym.make("MTTest/Guess-v0")
        env = TurnBudget(ErrorInjection(env, after_expert_steps=1), max_turns=3, mode="announced")
        rebuilt = gym.make(env.spec)
        a = env.reset(seed=5, options={"task_id": "secret-2"})
        b = rebuilt.reset(seed=5, options={"task_id": "secret-2"})
        assert a == b and "[Turns left: 3 of 3]" in a[0]
    finally:
        del gym.registry["MTTest/Guess-v0"]
