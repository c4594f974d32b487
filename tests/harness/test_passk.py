"""The pass@k estimator and the Pass@(K,T) surface, against brute force and the closed form."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.harness.passk import (
    pass_at_k,
    pass_at_k_table,
    pass_surface_from_first_success,
    pass_surface_per_budget,
)


def brute_force_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The U-statistic by definition: the share of K-subsets holding at least one success."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


def comb_pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@st.composite
def outcomes_and_k(draw: st.DrawFn) -> tuple[list[bool], int]:
    outcomes = draw(st.lists(st.booleans(), min_size=1, max_size=10))
    k = draw(st.integers(1, len(outcomes)))
    return outcomes, k


@given(outcomes_and_k())
def test_estimator_equals_brute_force_enumeration(case: tuple[list[bool], int]) -> None:
    outcomes, k = case
    assert pass_at_k(len(outcomes), sum(outcomes), k) == pytest.approx(
        brute_force_pass_at_k(outcomes, k), abs=1e-12
    )


@pytest.mark.parametrize("n", [1, 2, 8, 16, 64, 200])
def test_product_form_equals_closed_comb_form_for_every_c_and_k(n: int) -> None:
    table = pass_at_k_table(n)
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = comb_pass_at_k(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
            assert table[c, k - 1] == pytest.approx(expected, abs=1e-12)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_no_success_gives_zero_and_pass_at_1_is_the_success_share(nk: tuple[int, int]) -> None:
    n, k = nk
    assert pass_at_k(n, 0, k) == 0.0
    for c in (0, n // 2, n):
        assert pass_at_k(n, c, 1) == pytest.approx(c / n)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_fewer_failures_than_k_gives_one(nc: tuple[int, int]) -> None:
    n, c = nc
    for k in range(n - c + 1, n + 1):
        assert pass_at_k(n, c, k) == 1.0


def test_large_n_has_no_overflow() -> None:
    value = pass_at_k(10_000, 3, 5_000)
    assert value == pytest.approx(comb_pass_at_k(10_000, 3, 5_000), abs=1e-12)
    assert 0.0 < value < 1.0


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((0, 0, 1), ValueError, "n (rollouts)"),
        ((5, 6, 1), ValueError, "0 <= c <= n"),
        ((5, -1, 1), ValueError, "0 <= c <= n"),
        ((5, 2, 0), ValueError, "1 <= k <= n"),
        ((5, 2, 6), ValueError, "1 <= k <= n"),
        ((5.0, 2, 1), TypeError, "n must be an int"),
        ((5, 2.0, 1), TypeError, "c must be an int"),
        ((5, 2, True), TypeError, "k must be an int"),
        ((5, "2", 1), TypeError, "c must be an int"),
    ],
)
def test_bad_counts_give_clear_errors(args: tuple, error: type, words: str) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        pass_at_k(*args)


def test_numpy_integers_are_accepted() -> None:
    assert pass_at_k(np.int64(4), np.int32(2), np.int64(2)) == pytest.approx(1 - 1 / 6)


# ---------------------------------------------------------------------- the (K,T) surface
first_success = st.one_of(st.none(), st.integers(1, 6))


@st.composite
def hidden_runs(draw: st.DrawFn) -> dict[str, list[int | None]]:
    n_tasks = draw(st.integers(1, 4))
    return {
        f"task-{i}": draw(st.lists(first_success, min_size=3, max_size=7)) for i in range(n_tasks)
    }


@settings(max_examples=40)
@given(hidden_runs())
def test_surface_cells_equal_brute_force_per_task_mean(runs: dict[str, list[int | None]]) -> None:
    surface = pass_surface_from_first_success(runs, t_max=6)
    n_min = min(len(v) for v in runs.values())
    assert surface.ks.tolist() == list(range(1, n_min + 1))
    assert surface.ts.tolist() == list(range(1, 7))
    for k in surface.ks.tolist():
        for t in surface.ts.tolist():
            per_task = [
                brute_force_pass_at_k([s is not None and s <= t for s in turns], k)
                for turns in runs.values()
            ]
            assert surface.value(k, t) == pytest.approx(np.mean(per_task), abs=1e-12)
    assert surface.per_task.shape == (len(runs), n_min, 6)
    assert surface.n_per_task[:, 0].tolist() == [len(v) for v in runs.values()]
    assert surface.task_ids == tuple(runs)


@settings(max_examples=40)
@given(hidden_runs())
def test_surface_is_monotone_in_k_and_t(runs: dict[str, list[int | None]]) -> None:
    surface = pass_surface_from_first_success(runs, t_max=6)
    tol = 1e-12
    assert np.all(np.diff(surface.per_task, axis=1) >= -tol)  # more samples never hurt
    assert np.all(np.diff(surface.per_task, axis=2) >= -tol)  # more turns never hurt
    assert np.all((surface.values >= 0) & (surface.values <= 1))


def test_surface_on_a_hand_computed_case() -> None:
    surface = pass_surface_from_first_success(
        {"a": [1, None, 3, 2], "b": [None, None, 4, None, 1]}, t_max=4
    )
    # K=1: a's success share at T=1 is 1/4, b's is 1/5.
    assert surface.value(1, 1) == pytest.approx((1 / 4 + 1 / 5) / 2)
    # K=2, T=3: a has c=3 of 4 -> 1; b has c=1 of 5 -> 1 - C(4,2)/C(5,2) = 0.4.
    assert surface.value(2, 3) == pytest.approx((1.0 + 0.4) / 2)
    with pytest.raises(KeyError, match="K=5"):
        surface.value(5, 1)


def test_grids_can_be_chosen_and_are_sorted() -> None:
    surface = pass_surface_from_first_success(
        {"a": [1, 2, None, None]}, t_max=8, ks=[4, 1, 2], ts=[8, 2]
    )
    assert surface.ks.tolist() == [1, 2, 4]
    assert surface.ts.tolist() == [2, 8]
    assert surface.value(2, 2) == pytest.approx(comb_pass_at_k(4, 2, 2))


def test_k_above_a_tasks_n_is_an_error_by_default() -> None:
    runs = {"small": [1, None], "big": [1, None, None, 2]}
    with pytest.raises(ValueError, match="'small' has n=2 rollouts but K=3"):
        pass_surface_from_first_success(runs, t_max=3, ks=[1, 3])


def test_k_above_a_tasks_n_can_exclude_that_task() -> None:
    runs = {"small": [1, None], "big": [1, None, None, 2]}
    surface = pass_surface_from_first_success(runs, t_max=3, ks=[1, 3], small_n="exclude")
    assert np.isnan(surface.per_task[0, 1]).all()
    assert surface.tasks_in_cell(3, 2) == 1
    assert surface.tasks_in_cell(1, 2) == 2
    assert surface.value(3, 2) == pytest.approx(comb_pass_at_k(4, 2, 3))
    assert surface.to_dict()["per_task"][0][1] == [None, None, None]


def test_default_k_grid_stops_at_the_smallest_n() -> None:
    surface = pass_surface_from_first_success({"a": [1, 2], "b": [None] * 5}, t_max=2)
    assert surface.ks.tolist() == [1, 2]


@pytest.mark.parametrize(
    ("runs", "t_max", "words"),
    [
        ({"a": [0]}, 3, "outside 1..t_max=3"),
        ({"a": [4]}, 3, "outside 1..t_max=3"),
        ({"a": []}, 3, "no rollouts"),
        ({}, 3, "no tasks"),
        ({"a": [1]}, 0, "t_max must be >= 1"),
    ],
)
def test_bad_success_turns_give_clear_errors(runs: dict, t_max: int, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        pass_surface_from_first_success(runs, t_max=t_max)


def test_t_grid_beyond_t_max_is_refused() -> None:
    with pytest.raises(ValueError, match="T=9 exceeds the maximum 8"):
        pass_surface_from_first_success({"a": [1]}, t_max=8, ts=[9])


def test_monte_carlo_mean_matches_the_truth_under_a_hazard_model() -> None:
    """Unbiasedness, cheaply: per-turn success hazard h, n=8 rollouts per replicate."""
    rng = np.random.default_rng(7)
    hazard, n, t_max, reps = 0.2, 8, 4, 3000
    # First-success turn of a geometric hazard, capped: None when beyond t_max.
    turns = rng.geometric(hazard, size=(reps, n))
    runs = {f"r{i}": [int(x) if x <= t_max else None for x in row] for i, row in enumerate(turns)}
    surface = pass_surface_from_first_success(runs, t_max=t_max, ks=[1, 4, 8])
    for k in (1, 4, 8):
        for t in (1, 2, 4):
            p_t = 1 - (1 - hazard) ** t
            truth = 1 - (1 - p_t) ** k
            se = surface.per_task[:, surface._row(k), surface._col(t)].std() / np.sqrt(reps)
            assert abs(surface.value(k, t) - truth) < 4 * se + 1e-9, (k, t)


# ---------------------------------------------------------------------- announced budgets
def test_per_budget_surface_uses_each_budgets_own_rollouts() -> None:
    runs = {
        2: {"a": [True, False, False], "b": [False, False, False, False]},
        4: {"a": [True, True, False], "b": [True, False, False, False]},
    }
    surface = pass_surface_per_budget(runs)
    assert surface.budget_mode == "announced"
    assert surface.ts.tolist() == [2, 4]
    assert surface.ks.tolist() == [1, 2, 3]
    assert surface.value(1, 2) == pytest.approx((1 / 3 + 0) / 2)
    assert surface.value(2, 4) == pytest.approx((1.0 + comb_pass_at_k(4, 1, 2)) / 2)
    assert surface.n_per_task.tolist() == [[3, 3], [4, 4]]


def test_per_budget_surface_may_decrease_in_t() -> None:
    surface = pass_surface_per_budget({1: {"a": [True, True]}, 2: {"a": [False, True]}})
    assert surface.value(1, 1) > surface.value(1, 2)


def test_per_budget_needs_the_same_tasks_at_every_budget() -> None:
    with pytest.raises(ValueError, match=r"T=4 covers different tasks .*missing \['b'\]"):
        pass_surface_per_budget({2: {"a": [True], "b": [False]}, 4: {"a": [True]}})


def test_per_budget_rejects_non_bool_outcomes_and_large_k() -> None:
    with pytest.raises(TypeError, match="must be bools"):
        pass_surface_per_budget({2: {"a": [1, 0]}})
    with pytest.raises(ValueError, match="K=3"):
        pass_surface_per_budget({2: {"a": [True, False]}}, ks=[3])


@settings(max_examples=30)
@given(
    st.dictionaries(
        st.integers(1, 5),
        st.lists(st.booleans(), min_size=2, max_size=6),
        min_size=1,
        max_size=3,
    )
)
def test_per_budget_cells_equal_brute_force(flags_by_t: dict[int, list[bool]]) -> None:
    surface = pass_surface_per_budget({t: {"only": flags} for t, flags in flags_by_t.items()})
    for t, flags in flags_by_t.items():
        for k in surface.ks.tolist():
            assert surface.value(k, t) == pytest.approx(brute_force_pass_at_k(flags, k))
