"""Huge and absurd values of budgets, wrapper arguments and env kwargs: each works or is refused
with a clear error at construction, never an out-of-memory or a hang later."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest

import multiturn_envs  # noqa: F401 (registers MT/*)
from multiturn_envs.core import TextEnv
from multiturn_envs.envs.bfcl.env import BFCLEnv
from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv
from multiturn_envs.testing import GuessEnv
from multiturn_envs.wrappers import BudgetMix, ErrorInjection, TurnBudget
from multiturn_envs.wrappers.budget_mix import MAX_LISTED_BUDGETS
from multiturn_envs.wrappers.error_injection import MAX_PREFIX_STEPS

HUGE = 10**18

ENVS: dict[str, Callable[[], TextEnv]] = {
    "guess": GuessEnv,
    "frozenlake-8x8-slippery": lambda: FrozenLakeTextEnv(tasks=["8x8"], is_slippery=True),
    "bfcl-bundled": lambda: BFCLEnv(source="bundled"),
}


@pytest.mark.parametrize("name", sorted(ENVS))
@pytest.mark.parametrize("budget", [10**9, HUGE])
def test_any_env_takes_a_huge_budget(name: str, budget: int) -> None:
    env = TurnBudget(ENVS[name](), max_turns=budget)
    _, info = env.reset(seed=0)
    assert info["max_turns"] == budget and info["turns_left"] == budget
    base = env.unwrapped
    assert isinstance(base, TextEnv)
    action = base.expert_action()
    _, _, _, truncated, info = env.step(action)
    assert not truncated and info["turns_left"] == budget - 1
    assert 0.0 <= info["step_score"] <= 1.0
    env.close()


def test_frozenlake_huge_budget_announced_and_through_gym_make() -> None:
    env = gym.make(
        "MT/FrozenLake-v0",
        max_turns=HUGE,
        tasks=["4x4"],
        is_slippery=True,
        budget_mode="announced",
    )
    obs, _ = env.reset(seed=3)
    assert f"of {HUGE}]" in obs
    obs, *_ = env.step("<answer>Down</answer>")
    assert f"[Turns left: {HUGE - 1} of {HUGE}]" in obs
    env.close()


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10"])
def test_absurd_budgets_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        TurnBudget(GuessEnv(), max_turns=bad)  # type: ignore[arg-type]


def test_budget_mix_draws_from_a_huge_range_without_listing_it() -> None:
    env = BudgetMix(GuessEnv(), budgets=range(1, HUGE))
    seen = set()
    for seed in range(20):
        _, info = env.reset(seed=seed)
        assert 1 <= info["max_turns"] < HUGE
        seen.add(info["max_turns"])
    assert len(seen) == 20  # uniform over 10**18 values: no repeats in 20 draws
    _, again = env.reset(seed=7)
    _, first = BudgetMix(GuessEnv(), budgets=range(1, HUGE)).reset(seed=7)
    assert again["max_turns"] == first["max_turns"]  # the seed fixes the draw


def test_budget_mix_refuses_what_it_cannot_hold_or_check() -> None:
    with pytest.raises(ValueError, match="range"):
        BudgetMix(GuessEnv(), budgets=[5] * (MAX_LISTED_BUDGETS + 1))
    with pytest.raises(ValueError, match="weights"):
        BudgetMix(GuessEnv(), budgets=range(1, HUGE), weights=[1.0])
    with pytest.raises(ValueError, match="max_turns"):
        BudgetMix(GuessEnv(), budgets=range(0, HUGE))  # 0 is not a budget
    with pytest.raises(ValueError, match="at least one"):
        BudgetMix(GuessEnv(), budgets=range(5, 5))
    # a short range behaves as the same list does (same draws for the same seed)
    as_range = BudgetMix(GuessEnv(), budgets=range(2, 9)).reset(seed=4)[1]["max_turns"]
    as_list = BudgetMix(GuessEnv(), budgets=list(range(2, 9))).reset(seed=4)[1]["max_turns"]
    assert as_range == as_list


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"after_expert_steps": 10**9}, "at most"),
        ({"after_expert_steps": (0, HUGE)}, "at most"),
        ({"after_expert_steps": -1}, ">= 0"),
        ({"max_tries": 0}, "max_tries"),
        ({"max_tries": HUGE}, "max_tries"),
    ],
)
def test_error_injection_refuses_absurd_prefixes(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ErrorInjection(GuessEnv(), **kwargs)  # type: ignore[arg-type]


def test_error_injection_at_the_largest_prefix_fails_fast_on_a_short_task() -> None:
    env = ErrorInjection(GuessEnv(), after_expert_steps=MAX_PREFIX_STEPS, max_tries=2)
    with pytest.raises(RuntimeError, match="could not inject"):
        env.reset(seed=0)  # the expert solves the task long before: a clear error, at once


def test_bfcl_refuses_a_nonsense_step_limit_and_takes_a_huge_one() -> None:
    for bad in (0, -3, 1.5):
        with pytest.raises(ValueError, match="max_steps_per_turn"):
            BFCLEnv(source="bundled", max_steps_per_turn=bad)  # type: ignore[arg-type]
    env = BFCLEnv(source="bundled", max_steps_per_turn=HUGE)
    env.reset(seed=0)
    env.step(env.expert_action())
    env.close()


def test_huge_numpy_budget() -> None:
    env = TurnBudget(GuessEnv(), max_turns=np.int64(2**62))  # type: ignore[arg-type]
    _, info = env.reset(seed=0)
    assert info["max_turns"] == 2**62 and isinstance(info["max_turns"], int)
