"""One owner of an episode's budget: the env decides it at ``reset``, from one precedence.

The reset's own options win, then the budget wrappers outermost first, then the env's
constructor arguments; each key (``max_turns``, ``budget_mode``) on its own. No layer writes
the env's budget: constructing a wrapper changes nothing, and the source has no writer of
another object's budget (checked on the AST).
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.harness.replay import budget_stack
from multiturn_envs.testing import GuessEnv
from multiturn_envs.wrappers import BudgetMix, ErrorInjection, TurnBudget, TurnReward

PACKAGE = Path(__file__).resolve().parents[2] / "multiturn_envs"
BUDGET_ATTRIBUTES = {"_max_turns", "_budget_mode", "_default_budget", "max_turns", "budget_mode"}


def _state(env: GuessEnv) -> dict[str, Any]:
    return copy.deepcopy({**env.get_state(), "default": env.default_budget})


def test_constructing_wrappers_changes_nothing_in_the_env() -> None:
    env = GuessEnv(max_turns=6)
    env.reset(seed=1, options={"task_id": "secret-4"})
    env.step("guess 2")
    before = _state(env)
    TurnBudget(env, max_turns=2, mode="announced")
    BudgetMix(env, budgets=[1, 2, 3], mode="announced")
    BudgetMix(env, budgets=range(1, 10**12))
    ErrorInjection(env, after_expert_steps=1)
    TurnReward(env, "process")
    budget_stack(env, 3, "announced", error_after=1)
    assert _state(env) == before  # the live episode and the default are untouched


@given(
    default=st.sampled_from([None, 6]),
    layers=st.lists(st.integers(1, 9), max_size=3),
    asked=st.sampled_from([None, 7]),
)
def test_the_caller_then_the_outermost_wrapper_then_the_env(
    default: int | None, layers: list[int], asked: int | None
) -> None:
    """``layers`` are TurnBudgets, innermost first; ``asked`` is what the reset names."""
    env: gym.Env[str, str] = GuessEnv(max_turns=default)
    for budget in layers:
        env = TurnBudget(env, budget)
    options: dict[str, Any] = {"task_id": "secret-3"}
    if asked is not None:
        options["max_turns"] = asked
    _, info = env.reset(seed=0, options=options)
    want = asked if asked is not None else (layers[-1] if layers else default)
    assert info["max_turns"] == want
    _, info = env.reset(seed=0, options={"task_id": "secret-3"})  # for that episode only
    assert info["max_turns"] == (layers[-1] if layers else default)
    assert env.unwrapped.default_budget == (default, "hidden")  # type: ignore[attr-defined]


def test_each_key_on_its_own() -> None:
    env = TurnBudget(GuessEnv(max_turns=6), max_turns=4, mode="announced")
    obs, info = env.reset(options={"task_id": "secret-3", "max_turns": 2})
    assert (info["max_turns"], info["budget_mode"]) == (2, "announced")
    assert obs.endswith("[Turns left: 2 of 2]")
    _, info = env.reset(options={"task_id": "secret-3", "budget_mode": "hidden"})
    assert (info["max_turns"], info["budget_mode"]) == (4, "hidden")


def test_budget_mix_and_turn_budget_outermost_wins() -> None:
    mix = BudgetMix(GuessEnv(), budgets=[1, 2, 3])
    outer = TurnBudget(mix, max_turns=8)  # the harness's run around a user's BudgetMix
    assert all(outer.reset(seed=s)[1]["max_turns"] == 8 for s in range(20))
    inner = BudgetMix(TurnBudget(GuessEnv(), max_turns=8), budgets=[1, 2, 3])
    assert {inner.reset(seed=s)[1]["max_turns"] for s in range(20)} == {1, 2, 3}
    # a row that names a budget wins over the draw, and the draws after it are unchanged
    named = BudgetMix(GuessEnv(), budgets=[1, 2, 3])
    plain = BudgetMix(GuessEnv(), budgets=[1, 2, 3])
    assert named.reset(seed=5, options={"max_turns": 9})[1]["max_turns"] == 9
    plain.reset(seed=5)
    assert [named.reset()[1]["max_turns"] for _ in range(10)] == [
        plain.reset()[1]["max_turns"] for _ in range(10)
    ]


def test_bad_budgets_in_options_are_refused_and_change_nothing() -> None:
    env = GuessEnv(max_turns=6)
    for bad in ({"max_turns": 0}, {"max_turns": True}, {"max_turns": "3"}, {"budget_mode": "x"}):
        with pytest.raises(ValueError, match=r"max_turns|budget_mode"):
            env.reset(options={"task_id": "secret-1", **bad})
    with pytest.raises(ValueError, match="announced budget needs max_turns"):
        env.reset(options={"max_turns": None, "budget_mode": "announced"})
    assert env.default_budget == (6, "hidden")


def test_a_snapshot_carries_its_episode_budget() -> None:
    env = GuessEnv(max_turns=6)
    env.reset(options={"task_id": "secret-1", "max_turns": 2, "budget_mode": "announced"})
    snapshot = env.get_state()
    env.reset(options={"task_id": "secret-1"})
    env.set_state(snapshot)
    assert (env.max_turns, env.budget_mode, env.turns_left) == (2, "announced", 2)


def test_the_deprecated_setter_changes_the_default_only() -> None:
    env = GuessEnv(max_turns=6)
    env.reset(options={"task_id": "secret-1"})
    with pytest.warns(DeprecationWarning, match="set_turn_budget is deprecated"):
        env.set_turn_budget(3)
    assert env.max_turns == 6  # the live episode keeps its budget
    assert env.reset(options={"task_id": "secret-1"})[1]["max_turns"] == 3


def test_error_injection_is_played_once_and_the_run_must_agree() -> None:
    own = ErrorInjection(GuessEnv(), after_expert_steps=2)
    stack = budget_stack(own, 4, error_after=2)  # agrees: the env's own injection is kept
    _, info = stack.reset(seed=3, options={"task_id": "secret-13"})
    assert info["prefix_turns"] == 3 and info["max_turns"] == 4
    with pytest.raises(ValueError, match="injects errors itself"):
        budget_stack(own, 4, error_after=1)
    assert budget_stack(own, 4, error_after=None).reset(seed=3, options={"task_id": "secret-13"})


def _writes_of_another_budget(path: Path) -> list[str]:
    """``x.<budget attribute> = ...`` with ``x`` not ``self``, and calls of ``set_turn_budget``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr in BUDGET_ATTRIBUTES
                and not (isinstance(target.value, ast.Name) and target.value.id == "self")
            ):
                found.append(f"{path.name}:{node.lineno} writes {ast.unparse(target)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "set_turn_budget"
        ):
            found.append(f"{path.name}:{node.lineno} calls set_turn_budget")
    return found


def test_no_module_writes_an_envs_budget() -> None:
    """Only an env sets its own budget (``self.…`` in a ``TextEnv``); nothing reaches in."""
    found = [w for path in sorted(PACKAGE.rglob("*.py")) for w in _writes_of_another_budget(path)]
    assert found == []
