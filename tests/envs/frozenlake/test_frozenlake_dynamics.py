"""FrozenLake-text moves exactly like Gymnasium's FrozenLakeEnv: same P, same trajectories."""

from __future__ import annotations

import numpy as np
from frozenlake_strategies import any_success_rates, lake_maps
from gymnasium.envs.toy_text.frozen_lake import MAPS, FrozenLakeEnv, generate_random_map
from gymnasium.envs.toy_text.utils import categorical_sample
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.frozenlake.dynamics import ACTION_NAMES, LakeDynamics
from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv
from multiturn_envs.envs.frozenlake.maps import STANDARD_MAPS, desc_task_id, random_map


def test_standard_maps_are_gymnasiums() -> None:
    assert {k: list(v) for k, v in STANDARD_MAPS.items()} == MAPS


@settings(max_examples=40)
@given(st.integers(2, 9), st.floats(0.55, 1.0), st.integers(0, 2**31 - 1))
def test_random_maps_equal_gymnasiums_seeded_generator(size: int, p: float, seed: int) -> None:
    assert list(random_map(size, p, seed)) == generate_random_map(size, p, seed)


@settings(max_examples=60)
@given(lake_maps(), st.booleans(), any_success_rates)
def test_transition_table_is_gymnasiums(desc: tuple[str, ...], slippery: bool, rate: float) -> None:
    ours = LakeDynamics(desc, slippery, rate)
    theirs = FrozenLakeEnv(desc=list(desc), is_slippery=slippery, success_rate=rate)
    assert ours.gym_table() == theirs.P
    np.testing.assert_array_equal(ours.initial_distribution, theirs.initial_state_distrib)


@settings(max_examples=60)
@given(lake_maps(), st.booleans(), any_success_rates)
def test_probabilities_sum_to_one_and_terminals_absorb(
    desc: tuple[str, ...], slippery: bool, rate: float
) -> None:
    dyn = LakeDynamics(desc, slippery, rate)
    table = dyn.gym_table()
    for s in range(dyn.n_states):
        for a in range(4):
            assert abs(sum(p for p, *_ in table[s][a]) - 1.0) < 1e-12
            assert all(0.0 <= p <= 1.0 for p, *_ in table[s][a])
            if dyn.tiles[s] in "GH":
                assert table[s][a] == [(1.0, s, 0, True)]
            else:
                # entering a hole or the goal (and only that) ends the episode
                for _, s2, r, d in table[s][a]:
                    assert d == (dyn.tiles[s2] in "GH") and r == (dyn.tiles[s2] == "G")
    np.testing.assert_allclose(dyn.prob.sum(axis=2), 1.0, atol=1e-12)


@settings(max_examples=60)
@given(
    lake_maps(),
    st.booleans(),
    any_success_rates,
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(0, 3), min_size=1, max_size=40),
)
def test_same_trajectory_as_gymnasium(
    desc: tuple[str, ...], slippery: bool, rate: float, seed: int, actions: list[int]
) -> None:
    theirs = FrozenLakeEnv(desc=list(desc), is_slippery=slippery, success_rate=rate)
    # a budget longer than the episode: the step scores come from the finite-horizon DP
    ours = FrozenLakeTextEnv(max_turns=len(actions) + 1, is_slippery=slippery, success_rate=rate)
    s, _ = theirs.reset(seed=seed)
    ours.reset(seed=seed, options={"task_id": desc_task_id(desc)})
    assert ours.cell == s
    for a in actions:
        s, r, terminated, _, _ = theirs.step(a)
        _, r2, terminated2, truncated2, info = ours.step(ACTION_NAMES[a])
        assert (ours.cell, float(r), terminated) == (s, r2, terminated2)
        assert not truncated2 and info["cell"] == s
        assert ours.np_random.bit_generator.state == theirs.np_random.bit_generator.state
        if terminated:
            break


def test_draw_above_a_short_cumsum_picks_index_zero_like_gymnasium() -> None:
    # With success_rate 0.3 the entries' float cumsum ends at 0.9999999999999999: a draw
    # above it matches no entry, and Gymnasium's argmax(cumsum > u) then returns index 0.
    dyn = LakeDynamics(STANDARD_MAPS["4x4"], True, 0.3)
    last = dyn.cumsums[0][2][-1]
    assert last < 1.0
    u = float(np.nextafter(last, 1.0))
    probs = [o.prob for o in dyn.outcomes[0][2]]
    assert categorical_sample(probs, _FixedDraw(u)) == 0
    assert dyn.sample(0, 2, u) is dyn.outcomes[0][2][0]
    assert dyn.sample(0, 2, float(np.nextafter(last, 0.0))) is dyn.outcomes[0][2][-1]


class _FixedDraw:
    """A stand-in generator whose ``random()`` returns one chosen value."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u
