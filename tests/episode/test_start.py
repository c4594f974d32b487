"""EpisodeStart: the one reader of a row or a payload (issue 33). Real envs, hostile rows."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import multiturn_envs  # noqa: F401
from multiturn_envs.episode import ENV_DEFAULT, FIELDS, MAX_SEED, EpisodeStart, make_env
from multiturn_envs.rewards import Process
from multiturn_envs.testing import GuessEnv
from multiturn_envs.wrappers import ErrorInjection

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
"""Anything a dataset row or a JSON payload may hold."""


def test_a_row_names_an_episode_and_everything_else_is_ignored() -> None:
    start = EpisodeStart.from_row(
        {"prompt": [{"role": "user"}], "task_id": "4x4", "seed": 3, "max_turns": 5,
         "budget_mode": "announced", "error_after": 1, "reward": "process", "other": object()}
    )  # fmt: skip
    assert start == EpisodeStart("4x4", 3, 5, "announced", 1, Process(weight=0.5))
    assert EpisodeStart.from_row({}) == EpisodeStart()
    assert EpisodeStart.from_row({"task_id": 7, "seed": 2.0}).task_id == "7"
    assert EpisodeStart.from_row({"seed": np.int64(4)}).seed == 4


def test_the_namespaced_spelling_wins_and_owned_names_are_the_framework_s() -> None:
    row = {"max_turns": 1, "mt_max_turns": 6, "mt_seed": 9, "seed": 1}
    assert EpisodeStart.from_row(row).max_turns == 6
    assert EpisodeStart.from_row(row).seed == 9
    skyrl = {"max_turns": 1, "task_id": "4x4"}  # SkyRL's own cap under the plain name
    assert EpisodeStart.from_row(skyrl, owned={"max_turns"}).max_turns is ENV_DEFAULT
    extra = {"task_id": "8x8", "seed": 5}
    start = EpisodeStart.from_row({"task_id": "4x4", "seed": None}, fallback=extra)
    assert (start.task_id, start.seed) == ("4x4", 5)  # verl's extra_info fills the gaps


def test_a_missing_value_is_the_env_s_default_but_a_client_s_null_budget_is_none() -> None:
    assert EpisodeStart.from_row({"max_turns": None}).max_turns is ENV_DEFAULT
    assert EpisodeStart.from_payload({"max_turns": None}).max_turns is None
    assert EpisodeStart.from_payload({}).max_turns is ENV_DEFAULT
    with pytest.raises(ValueError, match="budget_mode must be one of"):
        EpisodeStart.from_payload({"budget_mode": None})
    env = GuessEnv(max_turns=4)
    _, info = EpisodeStart.from_payload({"max_turns": None, "task_id": "secret-1"}).reset(env)
    assert info["max_turns"] is None
    _, info = EpisodeStart.from_row({"max_turns": None, "task_id": "secret-1"}).reset(env)
    assert info["max_turns"] == 4


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"seed": -1}, "seed must be an int >= 0, got -1"),
        ({"seed": True}, "seed must be an int >= 0"),
        ({"seed": "3"}, "seed must be an int >= 0"),
        ({"seed": 2.5}, "seed must be an int >= 0"),
        ({"seed": MAX_SEED}, "seed must be below"),
        ({"max_turns": 0}, "max_turns must be a positive int"),
        ({"max_turns": "8"}, "max_turns must be a positive int"),
        ({"budget_mode": "loud"}, "budget_mode must be one of"),
        ({"task_id": ["a"]}, "task_id must be a string"),
        ({"task_id": "x" * 5000}, "task_id must be a string of at most"),
        ({"error_after": -1}, "error_after must be an int in"),
        ({"error_after": [3, 1]}, "lo <= hi"),
        ({"error_after": 10**9}, "error_after must be below"),
        ({"reward": "best"}, "reward must be one of"),
        ({"reward": 0.7}, "a column of another meaning needs another name"),
        ({"reward": {"name": "process", "weight": math.nan}}, "weight must be a finite"),
    ],
)
def test_a_bad_field_is_a_value_error_naming_it(row: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EpisodeStart.from_row(row)


@given(st.dictionaries(st.sampled_from([*FIELDS, *(f"mt_{f}" for f in FIELDS), "x"]), JSON))
def test_any_row_is_an_episode_start_or_a_value_error(row: dict[str, Any]) -> None:
    try:
        start = EpisodeStart.from_row(row)
    except ValueError:
        return
    assert EpisodeStart.from_row(start.row()) == start  # what it writes, it reads back
    assert EpisodeStart.from_row(start.row(names="namespaced")) == start


@given(
    task=st.sampled_from([None, "secret-3", "secret-11"]),
    seed=st.none() | st.integers(0, 2**70),
    budget=st.none() | st.integers(1, 9),
    announced=st.booleans(),
)
def test_the_reset_options_are_the_row_s_and_win_over_the_env_s(
    task: str | None, seed: int | None, budget: int | None, announced: bool
) -> None:
    row: dict[str, Any] = {"task_id": task, "seed": seed, "max_turns": budget}
    if announced and budget is not None:
        row["budget_mode"] = "announced"
    start = EpisodeStart.from_row(row)
    env = GuessEnv(max_turns=5)
    _, info = start.reset(env)
    assert info["max_turns"] == (5 if budget is None else budget)
    assert info["budget_mode"] == ("announced" if "budget_mode" in row else "hidden")
    if task is not None:
        assert info["task_id"] == task
    if seed is not None:  # the same row, the same episode
        twin = GuessEnv(max_turns=5)
        assert start.reset(twin) == start.reset(env)


def test_error_injection_from_a_row_starts_in_an_error_state_and_repeats() -> None:
    env = make_env("MT/FrozenLake-v0", {"max_turns": 6, "is_slippery": False})
    start = EpisodeStart.from_row({"task_id": "4x4", "seed": 3, "error_after": 1})
    _, info = start.reset(env)
    assert len(info["injected_actions"]) == 2 and info["error_action"]
    assert info["prefix_turns"] == 2 and info["turn"] == 0  # the budget is whole
    _, again = start.reset(env)
    assert again["injected_actions"] == info["injected_actions"]
    # no seed: drawn from the env's own generator, so a replayed sequence of resets repeats
    unseeded = dataclasses.replace(start, seed=None)
    a = make_env("MT/FrozenLake-v0", {"max_turns": 6})
    b = make_env("MT/FrozenLake-v0", {"max_turns": 6})
    a.reset(seed=11)
    b.reset(seed=11)
    assert unseeded.reset(a)[1]["injected_actions"] == unseeded.reset(b)[1]["injected_actions"]
    with pytest.raises(ValueError, match="already injects errors"):
        start.reset(ErrorInjection(gym.make("MT/FrozenLake-v0"), after_expert_steps=1))
    env.close()
    a.close()
    b.close()


def test_async_reset_is_the_same_reset() -> None:
    import asyncio

    start = EpisodeStart.from_row({"task_id": "secret-9", "seed": 1, "max_turns": 3})
    assert asyncio.run(start.areset(GuessEnv())) == start.reset(GuessEnv())


def test_the_budget_is_checked_with_the_env_s_default() -> None:
    start = EpisodeStart.from_row({"budget_mode": "announced"})
    assert start.budget((4, "hidden")) == (4, "announced")
    with pytest.raises(ValueError, match="announced budget needs max_turns"):
        start.budget((None, "hidden"))
    assert EpisodeStart.from_payload({"max_turns": None}).budget((4, "hidden")) == (None, "hidden")
