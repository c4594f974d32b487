"""The DP oracle against plain-Python references: value iteration, expectimax, enumeration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from frozenlake_strategies import lake_maps, success_rates
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.frozenlake.dynamics import ACTION_NAMES, LakeDynamics
from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv
from multiturn_envs.envs.frozenlake.maps import STANDARD_MAPS, desc_task_id
from multiturn_envs.envs.frozenlake.oracle import LakeOracle

Table = dict[int, dict[int, list[tuple[float, int, float, bool]]]]


def gym_p(desc: tuple[str, ...], slippery: bool, rate: float) -> Table:
    """Gymnasium's own transition table: the references below never see our arrays."""
    return FrozenLakeEnv(desc=list(desc), is_slippery=slippery, success_rate=rate).P


def plain_value_iteration(
    P: Table, gamma: float, sweeps: int = 20_000
) -> tuple[list[list[float]], bool]:
    """Q by textbook value iteration over ``P``, one state and action at a time; converged?"""
    n = len(P)
    v = [0.0] * n
    for _ in range(sweeps):
        q = [
            [sum(p * (r + (0.0 if d else gamma * v[s2])) for p, s2, r, d in P[s][a]) for a in P[s]]
            for s in range(n)
        ]
        new = [max(row) for row in q]
        if max(abs(x - y) for x, y in zip(new, v)) < 1e-14:
            return q, True
        v = new
    return q, False


def expectimax(P: Table, s: int, a: int, h: int) -> float:
    """P(reach G within ``h`` turns | play ``a`` now, then the best), by plain recursion."""
    if h == 0:
        return 0.0
    total = 0.0
    for p, s2, r, d in P[s][a]:
        later = 0.0 if d else max(expectimax(P, s2, b, h - 1) for b in range(4))
        total += p * (r + later)
    return total


def policy_success_by_enumeration(P: Table, oracle: LakeOracle, s: int, h: int) -> float:
    """Sum of the probabilities of every outcome path on which the expert reaches G in ``h``."""
    if h == 0:
        return 0.0
    a = oracle.expert(s, h)
    total = 0.0
    for p, s2, r, d in P[s][a]:
        if d:
            total += p * r
        else:
            total += p * policy_success_by_enumeration(P, oracle, s2, h - 1)
    return total


@settings(max_examples=25)
@given(lake_maps(max_side=4), st.booleans(), success_rates, st.sampled_from([0.5, 0.9, 0.99]))
def test_infinite_horizon_q_matches_plain_value_iteration(
    desc: tuple[str, ...], slippery: bool, rate: float, gamma: float
) -> None:
    P = gym_p(desc, slippery, rate)
    oracle = LakeOracle(LakeDynamics(desc, slippery, rate), gamma=gamma)
    discounted, converged = plain_value_iteration(P, gamma)
    assert converged
    np.testing.assert_allclose(oracle.discounted_q(), discounted, atol=1e-9)
    reach, converged = plain_value_iteration(P, 1.0, sweeps=5_000)
    # near-deterministic slips make plain value iteration crawl: compare where it converged
    # (the next test covers the rest by the fixed-point property)
    if converged:
        np.testing.assert_allclose(oracle.reach_q(), reach, atol=1e-8)


@settings(max_examples=30)
@given(lake_maps(), st.booleans(), success_rates)
def test_reach_probability_is_the_least_bellman_fixed_point(
    desc: tuple[str, ...], slippery: bool, rate: float
) -> None:
    P = gym_p(desc, slippery, rate)
    oracle = LakeOracle(LakeDynamics(desc, slippery, rate))
    q = oracle.reach_q()
    v = q.max(axis=1)
    for s in range(len(P)):
        for a in range(4):
            backup = sum(p * (r + (0.0 if d else v[s2])) for p, s2, r, d in P[s][a])
            assert math.isclose(q[s, a], backup, abs_tol=1e-10)
    # below it: every finite horizon; at 0: every cell with no path to a goal. The solve is
    # exact to ~1e-11 when a slip is near-impossible (rate 1 - 1e-6: an ill-conditioned system)
    assert np.all(v >= oracle.finite_v(60) - 1e-9)
    dist = oracle._goal_distance()
    assert np.all(v[dist < 0] == 0.0) and np.all(v[dist > 0] > 0.0)


def test_reach_probability_with_nearly_certain_moves() -> None:
    # plain value iteration needs millions of sweeps here; the exact solve does not
    oracle = LakeOracle(LakeDynamics(("GSSSS", "SHSSS", "SSSSS", "SSSFH"), True, 0.99999))
    v = oracle.reach_q().max(axis=1)
    assert v[0] == 0.0 and v[6] == 0.0 and v[19] == 0.0
    np.testing.assert_allclose(v[[1, 5, 7, 18]], 1.0, atol=1e-9)


@settings(max_examples=25)
@given(lake_maps(max_side=3), st.booleans(), success_rates, st.integers(0, 4))
def test_finite_horizon_q_matches_brute_force(
    desc: tuple[str, ...], slippery: bool, rate: float, h: int
) -> None:
    P = gym_p(desc, slippery, rate)
    oracle = LakeOracle(LakeDynamics(desc, slippery, rate))
    q = oracle.finite_q(h)
    for s in range(len(P)):
        for a in range(4):
            assert math.isclose(q[s, a], expectimax(P, s, a, h), abs_tol=1e-12)
        # the expert's closed-loop policy achieves V_h (enumerating every slip outcome)
        assert math.isclose(
            policy_success_by_enumeration(P, oracle, s, h), oracle.finite_v(h)[s], abs_tol=1e-12
        )


@settings(max_examples=30)
@given(lake_maps(), st.booleans(), success_rates, st.integers(1, 30))
def test_finite_horizon_is_monotone_and_converges_to_reach(
    desc: tuple[str, ...], slippery: bool, rate: float, h: int
) -> None:
    oracle = LakeOracle(LakeDynamics(desc, slippery, rate))
    v_prev, v = oracle.finite_v(h - 1), oracle.finite_v(h)
    assert np.all(v >= v_prev - 1e-15) and np.all(v <= oracle.reach_q().max(axis=1) + 1e-9)
    assert np.all((v >= 0.0) & (v <= 1.0 + 1e-12))
    assert np.all(oracle.finite_q(h)[oracle.dynamics.is_terminal] == 0.0)


def test_known_values_from_the_field_notes() -> None:
    slippery = LakeOracle(LakeDynamics(STANDARD_MAPS["4x4"], True, 1.0 / 3.0))
    assert slippery.finite_v(100)[0] == pytest.approx(0.744, abs=5e-4)
    np.testing.assert_allclose(slippery.reach_q()[0], [14 / 17] * 4, atol=1e-9)
    exact = LakeOracle(LakeDynamics(STANDARD_MAPS["4x4"], False, 1.0))
    np.testing.assert_array_equal(exact.finite_q(6)[0], [0, 1, 1, 0])
    np.testing.assert_array_equal(exact.finite_q(8)[0], [1, 1, 1, 1])


@settings(max_examples=30)
@given(lake_maps(), st.booleans(), success_rates, st.integers(1, 12), st.integers(0, 2**31))
def test_scores_expert_and_error(
    desc: tuple[str, ...], slippery: bool, rate: float, h: int, seed: int
) -> None:
    oracle = LakeOracle(LakeDynamics(desc, slippery, rate))
    rng = np.random.default_rng(seed)
    for s in np.flatnonzero(~oracle.dynamics.is_terminal):
        q, best = oracle.finite_q(h)[s], oracle.finite_v(h)[s]
        scores = oracle.scores(s, h)
        if best == 0.0:
            assert np.all(scores == 1.0) and oracle.noop_score(s, h) == 1.0
        else:
            np.testing.assert_allclose(scores, q / best, atol=1e-11)
            assert oracle.noop_score(s, h) == pytest.approx(oracle.finite_v(h - 1)[s] / best)
        expert = oracle.expert(s, h)
        assert scores[expert] == 1.0 and q[expert] == pytest.approx(best, abs=1e-12)
        error = oracle.error(s, h, rng)
        safe = oracle.end_prob[s] == 0.0
        worse = scores < 1.0 - 1e-9
        if np.any(safe & worse):
            assert safe[error] and worse[error]
        elif np.any(safe):
            assert safe[error]
        elif np.any(worse):
            assert worse[error]
            least = oracle.hole_prob[s][worse].min()
            assert oracle.hole_prob[s, error] == pytest.approx(least, abs=1e-12)


_CANONICAL = {"<answer>up</answer>": "Up"}


@settings(max_examples=30)
@given(
    st.sampled_from(["4x4", "8x8", "random-s5-p0.8-n1"]),
    st.booleans(),
    st.one_of(st.none(), st.integers(1, 30)),
    st.lists(st.sampled_from([*ACTION_NAMES, "??", "<answer>up</answer>"]), max_size=12),
)
def test_step_score_is_score_action_and_scoring_changes_nothing(
    task_id: str, slippery: bool, max_turns: int | None, actions: list[str]
) -> None:
    env = FrozenLakeTextEnv(max_turns=max_turns, is_slippery=slippery)
    env.reset(seed=0, options={"task_id": task_id})
    for action in actions:
        if env.done:
            break
        before = env.get_state()
        predicted = {a: env.score_action(a) for a in [*ACTION_NAMES, "??"]}
        assert env.get_state() == before
        assert min(predicted.values()) >= 0.0 and max(predicted.values()) <= 1.0
        _, _, _, _, info = env.step(action)
        key = _CANONICAL.get(action, action)
        assert info["parse_error"] == (key == "??")
        assert info["step_score"] == predicted[key]


def test_unbudgeted_scores_use_reach_probability() -> None:
    env = FrozenLakeTextEnv(is_slippery=True)
    env.reset(seed=0, options={"task_id": desc_task_id(STANDARD_MAPS["4x4"])})
    # from the start all four moves reach the goal with probability 14/17: all score 1
    assert [env.score_action(a) for a in ACTION_NAMES] == [1.0] * 4
    assert env.score_action("no idea") == 1.0  # without a budget a wasted turn loses nothing


# ------------------------------------------------------------------ any turn budget


def _reference_rows(oracle: LakeOracle, horizon: int) -> list[np.ndarray]:
    """``Q_0..Q_horizon`` by the plain recursion, each as ``(n, 4)``."""
    n = oracle.dynamics.n_states
    v, rows = np.zeros(n), [np.zeros((n, 4))]
    for _ in range(horizon):
        q = oracle._backup(v)
        v = q.max(axis=0)
        rows.append(q.T)
    return rows


def test_a_budget_of_a_billion_turns_is_the_fixed_point() -> None:
    """The issue's case: 8x8, slippery, max_turns=10**9 (was a MemoryError for 1.86 TiB)."""
    import gymnasium as gym

    import multiturn_envs  # noqa: F401 (registers MT/*)

    env = gym.make("MT/FrozenLake-v0", max_turns=10**9, tasks=["8x8"], is_slippery=True)
    env.reset(seed=0)
    _, _, _, _, info = env.step("<answer>Right</answer>")
    assert info["turns_left"] == 10**9 - 1
    oracle = env.unwrapped.oracle
    k = oracle.fixed_horizon
    assert k is not None and k < 10**4 and oracle.exact
    # stored: the table up to the fixed point, nothing per turn of the budget
    assert oracle._finite[0].shape[0] == k + 1 and oracle._block is None
    np.testing.assert_array_equal(oracle.finite_q(10**9), oracle.finite_q(k))
    # the claim itself: more backups from V_k reproduce row k bit for bit
    q, v = np.empty((4, oracle.dynamics.n_states)), oracle.finite_v(k).copy()
    for _ in range(50):
        v_next = np.empty_like(v)
        assert oracle._step(v, q, v_next)
        np.testing.assert_array_equal(q.T, oracle.finite_q(k))
        v = v_next
    env.close()


@settings(max_examples=20)
@given(lake_maps(max_side=4), st.booleans(), success_rates, st.data())
def test_horizons_past_the_table_match_the_recursion(
    desc: tuple[str, ...], slippery: bool, rate: float, data: st.DataObject
) -> None:
    """With a tiny table (8 rows) every horizon beyond it comes from blocks and checkpoints."""
    oracle = LakeOracle(LakeDynamics(desc, slippery, rate))
    oracle._table_rows = 8  # blocks of 8 horizons too
    reference = _reference_rows(oracle, 400)
    asked = data.draw(st.lists(st.integers(0, 400), min_size=1, max_size=30))
    for h in [*asked, *range(399, 380, -1)]:
        np.testing.assert_allclose(oracle.finite_q(h), reference[h], rtol=0, atol=1e-13)
        rows = oracle._finite[0].shape[0] + (0 if oracle._block is None else 8)
        assert rows <= 16 + 1  # the table and one block, whatever was asked


def test_an_unconverged_budget_past_the_work_cap_is_flagged_with_its_gap() -> None:
    """4x4 with rare slips needs ~860,000 backups to converge: a small cap stops first."""
    oracle = LakeOracle(LakeDynamics(STANDARD_MAPS["4x4"], True, 0.99))
    oracle.max_horizon = 3_000
    q = oracle.finite_q(10**9)
    assert oracle.fixed_horizon is None and not oracle.exact
    np.testing.assert_array_equal(q, oracle.finite_q(3_000))
    gap = oracle.finite_gap()
    reach = oracle.reach_q().max(axis=1)
    assert 0.0 < gap < 1.0
    assert np.all(oracle.finite_v(3_000) <= reach + 1e-12)
    assert gap == pytest.approx(float(np.max(reach - oracle.finite_v(3_000))))


def test_score_tables_stay_bounded_over_many_horizons() -> None:
    import multiturn_envs.envs.frozenlake.oracle as oracle_module

    oracle = LakeOracle(LakeDynamics(STANDARD_MAPS["4x4"], True, 0.9))
    for h in range(oracle_module._SCORE_TABLES + 200):
        oracle.score_table(h)
    assert len(oracle._score_tables) == oracle_module._SCORE_TABLES
    # horizons past the fixed point share one table
    oracle.finite_q(10**6)
    k = oracle.fixed_horizon
    assert k is not None and oracle.score_table(10**6) is oracle.score_table(k + 5)
