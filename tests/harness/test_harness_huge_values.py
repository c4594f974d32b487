"""Huge or absurd run sizes get a clear error or work; never an out-of-memory death.

A turn budget of 10**9, a billion samples, an announced grid of a billion budgets: the harness
must not allocate per turn, per sample or per budget up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from harness_toy import ENV_ID, LineEnv

from multiturn_envs.harness import (
    EpisodeSeeds,
    EvalConfig,
    episode_seeds,
    main_report,
    read_run,
    run_eval,
)
from multiturn_envs.harness.passk import MAX_DEFAULT_T
from multiturn_envs.policies import ExpertPolicy, Reply, TurnRequest

HUGE = 10**9


def test_lazy_policy_seeds_equal_the_eager_ones() -> None:
    eager_env, eager = episode_seeds(7, "line-3", 2, 0, 40)
    lazy = EpisodeSeeds(7, "line-3", 2, 0)
    assert lazy.env_seed == eager_env
    assert [lazy.policy_seed(t) for t in range(40)] == eager
    assert EpisodeSeeds(7, "line-3", 2, 0).policy_seed(1000) > 0  # drawn on demand


def test_a_billion_turn_budget_runs_and_reports(tmp_path: Path) -> None:
    config = EvalConfig(ENV_ID, "expert", ["line-2", "line-3"], samples=3, max_turns=HUGE, seed=1)
    out = tmp_path / "huge.jsonl"
    make = lambda: LineEnv(max_turns=None, slip=0.0)  # noqa: E731
    summary = run_eval(config, ExpertPolicy(), str(out), make_env=make, progress=False)
    assert summary.written == 6
    run = read_run(out)
    assert {r["max_turns"] for r in run.records} == {HUGE}
    assert all(r["success"] for r in run.records)
    text = main_report([str(out)], n_boot=20, plots=False)
    assert str(HUGE) in text  # the T_max column is there; the grid is the breakpoints
    assert text.count("\n") < 4 * MAX_DEFAULT_T


def test_announced_mode_refuses_a_default_grid_of_a_billion_budgets() -> None:
    with pytest.raises(ValueError, match="give a turn_grid of at most"):
        EvalConfig(ENV_ID, "p", ["line-1"], samples=1, max_turns=HUGE, budget_mode="announced")
    grid = EvalConfig(
        ENV_ID, "p", ["line-1"], 1, HUGE, budget_mode="announced", turn_grid=[1, HUGE]
    )
    assert grid.budgets() == [1, HUGE]


class _StopAtFirstCall:
    name = "stop"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        raise RuntimeError(f"stopped with {len(requests)} requests")


def test_a_billion_samples_start_at_once(tmp_path: Path) -> None:
    config = EvalConfig(ENV_ID, "stop", ["line-1", "line-2"], samples=HUGE, max_turns=3)
    assert config.total() == 2 * HUGE
    with pytest.raises(RuntimeError, match="stopped with 4 requests"):
        run_eval(config, _StopAtFirstCall(), str(tmp_path / "r.jsonl"), in_flight=4)


@pytest.mark.parametrize(("in_flight", "workers"), [(0, 1), (10**9, 1), (4, 0), (4, 10**6)])
def test_absurd_pool_sizes_are_refused(tmp_path: Path, in_flight: int, workers: int) -> None:
    config = EvalConfig(ENV_ID, "expert", ["line-1"], samples=1, max_turns=3)
    with pytest.raises(ValueError, match=r"must be in 1\.\."):
        run_eval(
            config, ExpertPolicy(), str(tmp_path / "r.jsonl"), in_flight=in_flight, workers=workers
        )


def test_a_million_rollouts_per_task_report_on_a_bounded_grid() -> None:
    from multiturn_envs.harness import pass_at_k, pass_surface_from_first_success
    from multiturn_envs.harness.passk import MAX_DEFAULT_K

    n = 10**6
    turns = {"a": [1] * 3 + [None] * (n - 3), "b": [2] * 10 + [None] * (n - 10)}
    surface = pass_surface_from_first_success(turns, t_max=4)
    assert surface.ks.tolist() == [*range(1, MAX_DEFAULT_K + 1), n]
    # exact: the rows computed for the counts seen equal the scalar estimator
    for k in (1, 7, 512):
        want = (pass_at_k(n, 3, k) + pass_at_k(n, 10, k)) / 2
        assert surface.values[k - 1, -1] == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert surface.values[-1, -1] == 1.0  # K = n: some rollout of each task succeeded


def test_an_absurd_bootstrap_is_refused() -> None:
    from multiturn_envs.harness import bootstrap_ci

    with pytest.raises(ValueError, match="use fewer resamples"):
        bootstrap_ci([[0.5]] * 1000, n_boot=10**9)
