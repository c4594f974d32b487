"""Bootstrap over tasks: a reference implementation, coverage, pairing and NaN handling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from multiturn_envs.harness import bootstrap as bs
from multiturn_envs.harness.bootstrap import (
    bootstrap_ci,
    bootstrap_indices,
    paired_bootstrap_ci,
    paired_surface_ci,
    pooled_bootstrap_ci,
    surface_ci,
)
from multiturn_envs.harness.passk import pass_surface_from_first_success


def test_matches_the_direct_resample_and_quantile_reference() -> None:
    per_task = np.random.default_rng(3).random((40, 3, 2))
    ci = bootstrap_ci(per_task, n_boot=500, seed=11)
    idx = bootstrap_indices(40, 500, seed=11)
    reps = per_task[idx].mean(axis=1)
    low, high = np.quantile(reps, [0.025, 0.975], axis=0)
    np.testing.assert_allclose(ci.low, low, atol=1e-12)
    np.testing.assert_allclose(ci.high, high, atol=1e-12)
    np.testing.assert_allclose(ci.estimate, per_task.mean(axis=0))
    assert np.all(ci.low <= ci.estimate) and np.all(ci.estimate <= ci.high)


def test_chunking_does_not_change_the_replicates(monkeypatch: pytest.MonkeyPatch) -> None:
    per_task = np.random.default_rng(4).random((25, 4))
    whole = bootstrap_ci(per_task, n_boot=300, seed=5)
    monkeypatch.setattr(bs, "_CHUNK_CELLS", 25 * 7)  # 7 replicates per chunk
    chunked = bootstrap_ci(per_task, n_boot=300, seed=5)
    np.testing.assert_allclose(whole.low, chunked.low, atol=1e-12)
    np.testing.assert_allclose(whole.high, chunked.high, atol=1e-12)


def test_same_seed_same_interval_and_other_seed_differs() -> None:
    per_task = np.random.default_rng(0).random(30)
    a = bootstrap_ci(per_task, n_boot=400, seed=1)
    b = bootstrap_ci(per_task, n_boot=400, seed=1)
    c = bootstrap_ci(per_task, n_boot=400, seed=2)
    assert (a.low, a.high) == (b.low, b.high)
    assert (a.low, a.high) != (c.low, c.high)


def test_coverage_of_a_known_mean_is_near_nominal() -> None:
    """95 % intervals over 30 tasks should cover the true mean roughly 95 % of the time."""
    rng = np.random.default_rng(2024)
    true_p, n_tasks, trials = 0.3, 30, 200
    covered = 0
    for trial in range(trials):
        # Per-task pass@1 from 8 rollouts of a task whose own success rate varies.
        p_task = rng.beta(3.0, 7.0, size=n_tasks)  # mean 0.3
        per_task = rng.binomial(8, p_task) / 8
        ci = bootstrap_ci(per_task, n_boot=400, seed=trial)
        covered += bool(ci.low <= true_p <= ci.high)
    assert 0.88 <= covered / trials <= 0.99, covered / trials


def test_identical_policies_have_a_zero_difference_interval() -> None:
    per_task = np.random.default_rng(1).random((20, 3, 4))
    paired = paired_bootstrap_ci(per_task, per_task.copy(), n_boot=300, seed=0)
    assert np.all(paired.diff.low == 0.0) and np.all(paired.diff.high == 0.0)
    assert np.all(paired.diff.estimate == 0.0)
    np.testing.assert_array_equal(paired.a.low, paired.b.low)


@settings(max_examples=25)
@given(
    hnp.arrays(np.float64, st.integers(2, 15), elements=st.floats(0, 1)),
    st.floats(-0.5, 0.5),
)
def test_a_constant_shift_shifts_the_difference_interval_exactly(
    a: np.ndarray, shift: float
) -> None:
    b = a - shift
    paired = paired_bootstrap_ci(a, b, n_boot=200, seed=3)
    assert paired.diff.low == pytest.approx(shift, abs=1e-9)
    assert paired.diff.high == pytest.approx(shift, abs=1e-9)


def test_paired_interval_is_narrower_than_unpaired_under_shared_task_difficulty() -> None:
    rng = np.random.default_rng(9)
    difficulty = rng.random(50)
    a = np.clip(difficulty + 0.05 + rng.normal(0, 0.02, 50), 0, 1)
    b = np.clip(difficulty + rng.normal(0, 0.02, 50), 0, 1)
    paired = paired_bootstrap_ci(a, b, n_boot=1000, seed=0)
    unpaired_width = (paired.a.high - paired.a.low) + (paired.b.high - paired.b.low)
    assert paired.diff.high - paired.diff.low < 0.5 * unpaired_width
    assert paired.diff.low > 0  # the 0.05 advantage is detected


def test_nan_units_are_ignored_per_cell() -> None:
    per_task = np.array([[1.0, np.nan], [0.0, 0.5], [1.0, 0.5]])
    ci = bootstrap_ci(per_task, n_boot=300, seed=0)
    assert ci.estimate[0] == pytest.approx(2 / 3)
    assert ci.estimate[1] == pytest.approx(0.5)
    assert ci.low[1] == ci.high[1] == pytest.approx(0.5)


def test_a_cell_with_no_units_at_all_is_nan_not_an_error() -> None:
    ci = bootstrap_ci(np.array([[np.nan, 1.0], [np.nan, 0.0]]), n_boot=50)
    assert np.isnan(ci.estimate[0]) and np.isnan(ci.low[0]) and np.isnan(ci.high[0])
    assert ci.to_dict()["low"][0] is None


def test_surfaces_are_paired_by_task_id_not_by_position() -> None:
    runs = {"a": [1, None, 2], "b": [None, None, 3], "c": [1, 1, 1]}
    surf_a = pass_surface_from_first_success(runs, t_max=3)
    surf_b = pass_surface_from_first_success(dict(reversed(list(runs.items()))), t_max=3)
    paired = paired_surface_ci(surf_a, surf_b, n_boot=200)
    assert np.all(paired.diff.low == 0.0) and np.all(paired.diff.high == 0.0)
    single = surface_ci(surf_a, n_boot=200)
    assert single.low.shape == surf_a.values.shape


def test_surface_pairing_refuses_different_tasks_or_grids() -> None:
    one = pass_surface_from_first_success({"a": [1, None], "b": [None, 2]}, t_max=2)
    other = pass_surface_from_first_success({"a": [1, None], "z": [None, 2]}, t_max=2)
    with pytest.raises(ValueError, match=r"only in A \['b'\], only in B \['z'\]"):
        paired_surface_ci(one, other)
    shorter = pass_surface_from_first_success({"a": [1, None], "b": [None, 2]}, t_max=2, ts=[2])
    with pytest.raises(ValueError, match="different grids"):
        paired_surface_ci(one, shorter)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"per_unit": [], "n_boot": 10}, "at least one unit"),
        ({"per_unit": [0.5], "n_boot": 0}, "n_boot must be a positive int"),
        ({"per_unit": [0.5], "alpha": 1.0}, "alpha must be in"),
    ],
)
def test_bad_arguments_give_clear_errors(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        bootstrap_ci(**kwargs)


def test_paired_needs_equal_shapes() -> None:
    with pytest.raises(ValueError, match="same shape"):
        paired_bootstrap_ci(np.zeros(3), np.zeros(4))


# ------------------------------------------------------------- pooled over runs and units
def test_pooled_interval_counts_the_variation_between_runs() -> None:
    """Two runs that disagree completely: a bootstrap over units alone (of the mean over runs)
    sees no uncertainty; the pooled one spans both runs, crossed or not."""
    runs = [np.zeros(24), np.ones(24)]
    units_only = bootstrap_ci(np.mean(runs, axis=0), n_boot=500, seed=0)
    assert units_only.low == units_only.high == 0.5
    for crossed in (True, False):
        ci = pooled_bootstrap_ci(runs, crossed=crossed, n_boot=500, seed=0)
        assert float(ci.estimate) == 0.5
        assert float(ci.low) == 0.0 and float(ci.high) == 1.0


def test_one_run_is_the_ordinary_bootstrap_over_units() -> None:
    per_unit = np.random.default_rng(5).random((30, 2))
    pooled = pooled_bootstrap_ci([per_unit], crossed=True, n_boot=2000, seed=1)
    plain = bootstrap_ci(per_unit, n_boot=2000, seed=1)
    np.testing.assert_allclose(pooled.estimate, plain.estimate)
    np.testing.assert_allclose(pooled.low, plain.low, atol=0.02)
    np.testing.assert_allclose(pooled.high, plain.high, atol=0.02)


def test_pooled_coverage_of_a_known_mean_over_runs_and_units() -> None:
    """Runs whose own means scatter around a true gain, maps shared by the runs (crossed): the
    95 % two-way interval covers the true gain at least nominally (it errs on the wide side)."""
    rng = np.random.default_rng(7)
    true_gain, covered, trials = 0.07, 0, 150
    for trial in range(trials):
        map_effect = rng.normal(0, 0.08, 24)  # the same maps under every run
        runs = [
            true_gain + map_effect + rng.normal(0, 0.03) + rng.normal(0, 0.1, 24) for _ in range(6)
        ]
        ci = pooled_bootstrap_ci(runs, crossed=True, n_boot=400, seed=trial)
        covered += bool(ci.low <= true_gain <= ci.high)
    assert covered / trials >= 0.88, covered / trials


@settings(max_examples=25, deadline=None)
@given(
    st.lists(hnp.arrays(np.float64, 6, elements=st.floats(-1, 1)), min_size=1, max_size=4),
    st.floats(-0.5, 0.5),
    st.booleans(),
)
def test_pooled_interval_is_bounded_by_the_data_and_shifts_with_it(
    runs: list[np.ndarray], shift: float, crossed: bool
) -> None:
    ci = pooled_bootstrap_ci(runs, crossed=crossed, n_boot=200, seed=2)
    low, high = float(np.min(runs)), float(np.max(runs))
    assert low - 1e-9 <= float(ci.low) <= float(ci.high) <= high + 1e-9
    assert float(ci.estimate) == pytest.approx(np.mean([r.mean() for r in runs]))
    moved = pooled_bootstrap_ci([r + shift for r in runs], crossed=crossed, n_boot=200, seed=2)
    assert float(moved.low) == pytest.approx(float(ci.low) + shift, abs=1e-9)
    assert float(moved.high) == pytest.approx(float(ci.high) + shift, abs=1e-9)


def test_nested_runs_may_have_different_units_and_keep_cells() -> None:
    rng = np.random.default_rng(3)
    runs = [rng.random((n, 3, 2)) for n in (5, 9, 14)]
    ci = pooled_bootstrap_ci(runs, crossed=False, n_boot=300, seed=0)
    assert ci.estimate.shape == ci.low.shape == ci.high.shape == (3, 2)
    np.testing.assert_allclose(ci.estimate, np.mean([r.mean(axis=0) for r in runs], axis=0))
    assert np.all(ci.low <= ci.high)


@pytest.mark.parametrize(
    ("runs", "crossed", "words"),
    [
        ([], True, "at least one run"),
        ([np.zeros(3), np.zeros(4)], True, "crossed runs share their units"),
        ([np.zeros((3, 2)), np.zeros((3, 3))], False, "runs share their cells"),
        ([np.array([0.0, np.nan])], False, "non-finite"),
        ([np.zeros(0)], False, "at least one unit"),
    ],
)
def test_pooled_bad_input_is_named(runs: list[np.ndarray], crossed: bool, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        pooled_bootstrap_ci(runs, crossed=crossed, n_boot=10)


def test_pooled_refuses_a_resample_too_large_to_draw() -> None:
    with pytest.raises(ValueError, match="fewer resamples"):
        pooled_bootstrap_ci([np.zeros(1000)] * 3, crossed=False, n_boot=10**6)


def test_pooled_refuses_more_replicate_values_than_it_may_keep() -> None:
    """Nested runs keep one mean per replicate, slot and run: 60 runs of 100 cells at 2,000
    resamples would be 720 million values (5.8 GB), refused before any is drawn."""
    runs = [np.zeros((1, 100))] * 60
    with pytest.raises(ValueError, match="replicate values kept"):
        pooled_bootstrap_ci(runs, crossed=False, n_boot=2000)
    assert pooled_bootstrap_ci(runs, crossed=True, n_boot=2000).low.shape == (100,)
