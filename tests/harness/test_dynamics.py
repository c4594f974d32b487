"""Training dynamics against brute force, on real runs and on hand-made records."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.cli import main
from multiturn_envs.harness import EvalConfig, read_run, run_eval
from multiturn_envs.harness.dynamics import (
    per_task_means,
    step_reward,
    training_dynamics,
    trajectory_reward,
)
from multiturn_envs.policies.baselines import NoisyExpertPolicy

FROZEN = "MT/FrozenLake-v0"
TASKS = [f"random-s4-p0.8-n{i}" for i in range(6)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three "checkpoints": the noisy expert getting less noisy (0.9, 0.5, 0.1)."""
    root = tmp_path_factory.mktemp("dyn")
    paths = []
    for eps in (0.9, 0.5, 0.1):
        out = root / f"eps{eps}.jsonl"
        config = EvalConfig(
            env_id=FROZEN, policy=f"noisy-expert:{eps}", tasks=TASKS, samples=4, max_turns=8
        )
        run_eval(config, NoisyExpertPolicy(eps), str(out), progress=False)
        paths.append(out)
    return paths


def brute(records: list[dict[str, Any]], kind: str) -> tuple[float, float]:
    """Mean over tasks of per-task means, written out with plain loops."""
    traj: dict[str, list[float]] = {}
    step: dict[str, list[float]] = {}
    for r in records:
        traj.setdefault(r["task_id"], []).append(
            float(r["success"]) if kind == "success" else float(sum(r["rewards"]))
        )
        scores = [s for s in r["step_scores"] if s is not None]
        if scores:
            step.setdefault(r["task_id"], []).append(sum(scores) / len(scores))
    t = sum(sum(v) / len(v) for v in traj.values()) / len(traj)
    s = sum(sum(v) / len(v) for v in step.values()) / len(step)
    return t, s


def test_real_checkpoints_match_brute_force(checkpoints: list[Path]) -> None:
    runs = [read_run(p).records for p in checkpoints]
    result = training_dynamics(runs, ["a", "b", "c"], steps=[0, 50, 100], n_boot=300)
    assert result.tasks == sorted(TASKS)
    first_t, first_s = brute(runs[0], "success")
    for point, records in zip(result.points, runs):
        t, s = brute(records, "success")
        assert point.trajectory_reward.estimate == pytest.approx(t)
        assert point.step_reward.estimate == pytest.approx(s)
        assert point.d_trajectory.estimate == pytest.approx(t - first_t)
        assert point.d_step.estimate == pytest.approx(s - first_s)
        assert point.trajectory_reward.low <= t <= point.trajectory_reward.high
        assert point.n_trajectories == len(records)
    assert result.points[0].d_trajectory.low == result.points[0].d_trajectory.high == 0.0
    # a less noisy expert takes better steps: the step reward must rise clearly
    assert result.points[-1].d_step.low > 0
    text = result.format()
    assert "6 common tasks" in text and f"{result.points[-1].d_step.estimate:+.3f}" in text
    ret = training_dynamics(runs, ["a", "b", "c"], kind="return", n_boot=0)
    assert ret.points[1].trajectory_reward.estimate == pytest.approx(brute(runs[1], "return")[0])
    assert math.isnan(ret.points[1].trajectory_reward.low)


def test_only_common_tasks_count_and_unscored_steps_are_left_out() -> None:
    def rec(task: str, success: bool, scores: list[float | None]) -> dict[str, Any]:
        return {
            "task_id": task,
            "success": success,
            "return": float(success),
            "step_scores": scores,
        }

    a = [rec("t1", True, [1.0, None]), rec("t1", False, [0.0]), rec("t2", False, [0.5])]
    b = [rec("t1", True, [None, None]), rec("t1", True, [0.2, 0.4]), rec("t3", True, [1.0])]
    result = training_dynamics([a, b], ["a", "b"], n_boot=0)
    assert result.tasks == ["t1"]
    pa, pb = result.points
    assert pa.trajectory_reward.estimate == pytest.approx(0.5)
    assert pa.step_reward.estimate == pytest.approx(0.5)  # mean of 1.0 and 0.0
    assert pb.step_reward.estimate == pytest.approx(0.3)  # the all-None trajectory has none
    assert pb.d_trajectory.estimate == pytest.approx(0.5)
    assert pb.d_step.estimate == pytest.approx(-0.2)
    assert math.isnan(step_reward(rec("t", False, [None])))
    with pytest.raises(ValueError, match="no task in common"):
        training_dynamics([a, [rec("t9", True, [1.0])]], ["a", "b"])
    with pytest.raises(ValueError, match="trajectory reward is one of"):
        trajectory_reward(a[0], "bogus")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4), st.booleans(), st.lists(st.floats(0, 1), min_size=1, max_size=4)
        ),
        min_size=1,
        max_size=20,
    ),
    st.randoms(use_true_random=False),
)
def test_per_task_means_ignore_record_order(
    items: list[tuple[int, bool, list[float]]], rnd: Any
) -> None:
    records = [
        {"task_id": f"t{t}", "success": s, "return": float(s), "step_scores": sc}
        for t, s, sc in items
    ]
    tasks = sorted({r["task_id"] for r in records})
    shuffled = list(records)
    rnd.shuffle(shuffled)
    np.testing.assert_allclose(
        per_task_means(records, tasks), per_task_means(shuffled, tasks), rtol=1e-12
    )
    result = training_dynamics([records, shuffled], ["x", "y"], n_boot=50)
    d = result.points[1]
    assert d.d_trajectory.estimate == pytest.approx(0.0, abs=1e-12)
    assert d.d_step.estimate == pytest.approx(0.0, abs=1e-12)


def test_cli_dynamics_prints_writes_json_and_plots(
    checkpoints: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "dyn.json", tmp_path / "dyn.png"
    args = ["dynamics", *map(str, checkpoints), "--labels", "ck0,ck1,ck2"]
    args += ["--checkpoint-steps", "0,5,10"]
    assert main([*args, "--bootstrap", "100", "--json-out", str(out), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "Training dynamics" in printed and "ck2" in printed
    payload = json.loads(out.read_text())
    assert [p["step"] for p in payload["points"]] == [0, 5, 10]
    t, _ = brute(read_run(checkpoints[2]).records, "success")
    assert payload["points"][2]["trajectory_reward"]["estimate"] == pytest.approx(t)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert main(["dynamics", str(checkpoints[0]), "--labels", "a,b"]) == 2
    assert "need as many labels" in capsys.readouterr().err
    assert main(["dynamics", str(tmp_path / "none.jsonl")]) == 2
