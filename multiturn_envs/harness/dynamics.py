"""Training dynamics: trajectory reward against step reward across checkpoints.

The study reports that during DeepCoder-MT training the trajectory reward rose (+0.331) while
the step reward fell (-0.097): the policy got better at *finishing* without its single steps
getting better. Given one record file per checkpoint (each an ``eval`` of that checkpoint on
the same tasks), :func:`training_dynamics` puts the two side by side:

* **trajectory reward** of a trajectory: ``success`` (0/1, default) or its ``return`` (summed env
  reward);
* **step reward** of a trajectory: the mean of its oracle ``step_scores`` (``info["step_score"]``
  of every action; actions the env could not score, ``None``, are left out; a trajectory with no
  scored action has none);
* per checkpoint, each is the mean over tasks of the per-task mean over trajectories, with a
  percentile bootstrap interval over tasks; the change from the first checkpoint is paired (the
  same resampled tasks for both checkpoints), so its interval is that of the difference itself.

Only the tasks that every checkpoint ran count (listed in the result), so the points of the
curve are comparable. One resampled index set serves every number of one call.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from multiturn_envs.harness.bootstrap import (
    DEFAULT_N_BOOT,
    BootstrapCI,
    Interval,
    bootstrap_ci,
    bootstrap_indices,
)

__all__ = ["CheckpointPoint", "DynamicsResult", "plot_dynamics", "training_dynamics"]

REWARD_KINDS: tuple[str, ...] = ("success", "return")


def trajectory_reward(record: Mapping[str, Any], kind: str = "success") -> float:
    """A trajectory's reward: ``success`` as 0/1, or its ``return``."""
    if kind == "success":
        return float(bool(record["success"]))
    if kind == "return":
        return float(record["return"])
    raise ValueError(f"trajectory reward is one of {REWARD_KINDS}, got {kind!r}")


def step_reward(record: Mapping[str, Any]) -> float:
    """The mean oracle step score of a trajectory's scored actions (``NaN`` when none)."""
    scores = [float(s) for s in (record.get("step_scores") or []) if s is not None]
    return float(np.mean(scores)) if scores else math.nan


def per_task_means(
    records: Sequence[Mapping[str, Any]], tasks: Sequence[str], kind: str = "success"
) -> np.ndarray:
    """``(n_tasks, 2)``: per task the mean trajectory reward and the mean step reward."""
    traj: dict[str, list[float]] = defaultdict(list)
    step: dict[str, list[float]] = defaultdict(list)
    for rec in records:
        task = str(rec["task_id"])
        traj[task].append(trajectory_reward(rec, kind))
        s = step_reward(rec)
        if not math.isnan(s):
            step[task].append(s)
    out = np.full((len(tasks), 2), np.nan)
    for i, task in enumerate(tasks):
        if traj.get(task):
            out[i, 0] = float(np.mean(traj[task]))
        if step.get(task):
            out[i, 1] = float(np.mean(step[task]))
    return out


@dataclass(frozen=True)
class CheckpointPoint:
    """One checkpoint of the curve.

    Attributes:
        trajectory_reward, step_reward: means over tasks, intervals over tasks.
        d_trajectory, d_step: the change from the first checkpoint, paired over tasks.
    """

    label: str
    step: int | None
    n_trajectories: int
    trajectory_reward: Interval
    step_reward: Interval
    d_trajectory: Interval
    d_step: Interval

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "step": self.step}
        out["n_trajectories"] = self.n_trajectories
        for name in ("trajectory_reward", "step_reward", "d_trajectory", "d_step"):
            out[name] = getattr(self, name).to_dict()
        return out


@dataclass(frozen=True)
class DynamicsResult:
    """Trajectory and step reward of every checkpoint, on the tasks all of them ran."""

    points: list[CheckpointPoint]
    tasks: list[str]
    reward_kind: str
    alpha: float
    n_boot: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "reward_kind": self.reward_kind,
            "alpha": self.alpha,
            "n_boot": self.n_boot,
            "tasks": self.tasks,
            "points": [p.to_dict() for p in self.points],
        }

    def format(self) -> str:
        """The table ``multiturn-envs dynamics`` prints."""
        head = (
            f"Training dynamics: trajectory reward ({self.reward_kind}) vs step reward (mean "
            f"oracle step score); {len(self.tasks)} common tasks; {100 * (1 - self.alpha):g}% "
            f"CI over tasks (B={self.n_boot}); changes are vs {self.points[0].label}, paired"
        )
        cols = ["checkpoint", "step", "traj.", "traj. reward", "step reward"]
        cols += ["d traj. reward", "d step reward"]
        rows = [
            [
                p.label,
                "-" if p.step is None else str(p.step),
                str(p.n_trajectories),
                p.trajectory_reward.format(percent=False),
                p.step_reward.format(percent=False),
                _signed(p.d_trajectory),
                _signed(p.d_step),
            ]
            for p in self.points
        ]
        widths = [max(len(r[c]) for r in [cols, *rows]) for c in range(len(cols))]
        lines = [head]
        for r in [cols, *rows]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        return "\n".join(lines)


def _signed(interval: Interval) -> str:
    if math.isnan(interval.estimate):
        return "n/a"
    if math.isnan(interval.low):
        return f"{interval.estimate:+.3f}"
    return f"{interval.estimate:+.3f} [{interval.low:+.3f}, {interval.high:+.3f}]"


def _interval(ci: Any, *index: int) -> Interval:
    return Interval(float(ci.estimate[index]), float(ci.low[index]), float(ci.high[index]))


def training_dynamics(
    runs: Sequence[Sequence[Mapping[str, Any]]],
    labels: Sequence[str],
    steps: Sequence[int] | None = None,
    kind: str = "success",
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> DynamicsResult:
    """Trajectory reward against step reward for each checkpoint's trajectory records.

    Args:
        runs: per checkpoint, its trajectory records (dicts as the runner writes them).
        labels: a name per checkpoint.
        steps: the training step of each checkpoint (for the plot's x axis), optional.
        kind: ``"success"`` or ``"return"`` as the trajectory reward.
        n_boot, alpha, seed: the bootstrap over tasks (``n_boot=0``: no intervals).
    """
    if kind not in REWARD_KINDS:
        raise ValueError(f"trajectory reward is one of {REWARD_KINDS}, got {kind!r}")
    if not runs:
        raise ValueError("training dynamics needs at least one checkpoint")
    if len(labels) != len(runs) or (steps is not None and len(steps) != len(runs)):
        raise ValueError(f"{len(runs)} checkpoints need as many labels (and steps)")
    task_sets = [{str(r["task_id"]) for r in run} for run in runs]
    if any(not s for s in task_sets):
        empty = [labels[i] for i, s in enumerate(task_sets) if not s]
        raise ValueError(f"checkpoint(s) {empty} hold no trajectories")
    tasks = sorted(set.intersection(*task_sets))
    if not tasks:
        raise ValueError("the checkpoints have no task in common")
    wanted = set(tasks)
    kept = [[r for r in run if str(r["task_id"]) in wanted] for run in runs]
    # (n_tasks, n_checkpoints, 2): trajectory reward, step reward
    values = np.stack([per_task_means(run, tasks, kind) for run in kept], axis=1)
    deltas = values - values[:, :1, :]
    ci_v: BootstrapCI | None = None
    ci_d: BootstrapCI | None = None
    if n_boot > 0:
        indices = bootstrap_indices(len(tasks), n_boot, seed)
        ci_v = bootstrap_ci(values, alpha=alpha, seed=seed, indices=indices)
        ci_d = bootstrap_ci(deltas, alpha=alpha, seed=seed, indices=indices)
    points = []
    for c, label in enumerate(labels):
        intervals = []
        for ci, data in ((ci_v, values), (ci_d, deltas)):
            for j in (0, 1):
                if ci is not None:
                    intervals.append(_interval(ci, c, j))
                else:
                    column = data[:, c, j]
                    est = float(np.nanmean(column)) if np.isfinite(column).any() else math.nan
                    intervals.append(Interval(est, math.nan, math.nan))
        points.append(
            CheckpointPoint(
                label=str(label),
                step=None if steps is None else int(steps[c]),
                n_trajectories=len(kept[c]),
                trajectory_reward=intervals[0],
                step_reward=intervals[1],
                d_trajectory=intervals[2],
                d_step=intervals[3],
            )
        )
    return DynamicsResult(points, tasks, kind, alpha, n_boot)


def plot_dynamics(result: DynamicsResult, path: str | Path, overwrite: bool = False) -> Path:
    """Both rewards against the checkpoint (step when given) with their bands, as a PNG
    (written under the output rule: :mod:`multiturn_envs.output_files`)."""
    from multiturn_envs.output_files import check_output, png_is_ours, write_png

    check_output(path, overwrite=overwrite, is_ours=png_is_ours)  # before any drawing
    try:
        import matplotlib
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'multiturn-envs[plot]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    pts = result.points
    x = [p.step if p.step is not None else i for i, p in enumerate(pts)]
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    for name, colour, label in (
        ("trajectory_reward", "tab:blue", f"trajectory reward ({result.reward_kind})"),
        ("step_reward", "tab:orange", "step reward (mean step score)"),
    ):
        iv = [getattr(p, name) for p in pts]
        ax.plot(x, [i.estimate for i in iv], "-o", color=colour, ms=3, label=label)
        low, high = [i.low for i in iv], [i.high for i in iv]
        if not any(math.isnan(v) for v in low + high):
            ax.fill_between(x, low, high, color=colour, alpha=0.15, lw=0)
    if all(p.step is None for p in pts):
        ax.set_xticks(x, [p.label for p in pts], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("checkpoint")
    else:
        ax.set_xlabel("training step")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"Trajectory vs step reward ({len(result.tasks)} tasks)", fontsize=9)
    return write_png(path, fig, overwrite=overwrite)
