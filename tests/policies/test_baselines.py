"""Baselines: deterministic in the turn seed, uniform over valid actions, epsilon honoured."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import multiturn_envs  # noqa: F401
from multiturn_envs.core import TextEnv
from multiturn_envs.policies.base import Policy, TurnRequest
from multiturn_envs.policies.baselines import (
    ExpertPolicy,
    NoisyExpertPolicy,
    RandomPolicy,
    baseline_from_name,
    load_policy,
    random_action,
)


@pytest.fixture
def lake() -> TextEnv:
    env = gym.make("MT/FrozenLake-v0", max_turns=8)
    env.reset(seed=0, options={"task_id": env.unwrapped.task_ids()[0]})  # type: ignore[attr-defined]
    yield env.unwrapped  # type: ignore[misc]
    env.close()


def requests(env: TextEnv, seeds: Sequence[int]) -> list[TurnRequest]:
    return [TurnRequest(messages=env.messages(), env=env, seed=s) for s in seeds]


@given(seed=st.integers(0, 2**64 - 1))
def test_random_is_a_function_of_the_seed(seed: int) -> None:
    env = gym.make("MT/FrozenLake-v0").unwrapped
    env.reset(seed=1)
    a = RandomPolicy().act(requests(env, [seed, seed]))
    assert a[0].text == a[1].text
    assert a[0].text in env.valid_actions()
    env.close()


def test_random_is_uniform_over_valid_actions(lake: TextEnv) -> None:
    seeds = np.random.SeedSequence(5).generate_state(4000, dtype=np.uint64).tolist()
    counts = Counter(r.text for r in RandomPolicy().act(requests(lake, seeds)))
    assert set(counts) == set(lake.valid_actions())
    expected = 4000 / len(counts)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 16.3  # p ~ 0.001 for 3 degrees of freedom


def test_random_defers_to_an_env_that_overrides_random_action(lake: TextEnv) -> None:
    class Special(type(lake)):  # type: ignore[misc]
        def random_action(self, rng: np.random.Generator) -> str:
            return f"special {int(rng.integers(10))}"

    env = Special()
    env.reset(seed=0)
    assert random_action(env, 3) == random_action(env, 3)
    assert random_action(env, 3).startswith("special ")
    env.close()


def test_expert_is_the_oracle(lake: TextEnv) -> None:
    assert [r.text for r in ExpertPolicy().act(requests(lake, [1, 2]))] == [
        lake.expert_action()
    ] * 2


def test_noisy_expert_noise_rate_and_extremes(lake: TextEnv) -> None:
    seeds = np.random.SeedSequence(9).generate_state(3000, dtype=np.uint64).tolist()
    reqs = requests(lake, seeds)
    noisy = NoisyExpertPolicy(0.3).act(reqs)
    rate = sum(r.meta["noise"] for r in noisy) / len(noisy)
    assert abs(rate - 0.3) < 0.04
    assert all(r.text == lake.expert_action() for r in NoisyExpertPolicy(0.0).act(reqs))
    assert NoisyExpertPolicy(0.3).act(reqs) == noisy  # deterministic in the seeds
    random_texts = Counter(r.text for r in NoisyExpertPolicy(1.0).act(reqs))
    assert len(random_texts) == len(lake.valid_actions())


def test_names_and_specs() -> None:
    assert isinstance(baseline_from_name("random"), RandomPolicy)
    assert isinstance(baseline_from_name("expert"), ExpertPolicy)
    assert baseline_from_name("noisy-expert").epsilon == 0.1
    assert baseline_from_name("noisy-expert:0.25").name == "noisy-expert:0.25"
    assert isinstance(load_policy("multiturn_envs.policies.baselines:ExpertPolicy"), Policy)
    for bad, msg in [
        ("genius", "unknown baseline"),
        ("noisy-expert:x", "must be a number"),
        ("noisy-expert:2", r"in \[0, 1\]"),
        ("random:3", "unknown baseline"),
        ("no_such_mod:X", "cannot import"),
        ("multiturn_envs.policies.baselines:Nope", "has no attribute"),
        ("multiturn_envs.policies.baselines:BASELINE_NAMES", "neither a policy"),
    ]:
        with pytest.raises(ValueError, match=msg):
            load_policy(bad)
