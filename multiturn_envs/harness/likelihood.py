"""Likelihood analyses: how likely one policy's actions are under another model.

Two numbers of the study (PAPER.md, "Mechanism"), computed from record files:

* **Action NLL** (:func:`action_nll`): the negative log-likelihood of the recorded actions of a
  run under a *scoring model* B, teacher-forced in the exact conversation the policy saw. It is
  reported both **per token** (total NLL of all action tokens / their number) and **per action**
  (total NLL / number of actions): the two can rank runs differently when one run's actions are
  longer, so neither alone is the study's number.
* **Cumulative LLR** (:func:`trajectory_llr`): per trajectory,
  ``sum over its actions of (log p_A(action) - log p_B(action))`` under two scoring models A and
  B, averaged over trajectories and split by success.

Both are means over pooled units (tokens, actions or trajectories) with percentile bootstrap
intervals over **tasks** (the ratio of resampled sums; a task's trajectories are never split),
the same unit as every other interval of the harness.

Exactness: the conversation of every action is rebuilt by replaying the record
(:mod:`.replay`: the run's budget and error injection, its seed and actions, checked against
the record). Each action is tokenised on its
own and closed with the model's EOS (:meth:`ChatPrompter.sequence_of`), and a whole trajectory
is ONE scoring sequence (one forward pass). Log-probs from different engines or dtypes differ
by up to ~0.3 nats per token (bf16 vLLM vs HF), far more than many effects measured here, so an
LLR refuses two scoring models that do not share engine and dtype
(:func:`~multiturn_envs.policies.scoring.ensure_comparable`).

What is scored is the action text the env received (the record's ``actions``): after
the policy's action extraction (``<think>`` blocks and surrounding whitespace removed), not
the raw completion, because only the text is common to two models with different tokenisers.
For a model without a thinking block the two differ at most in whitespace. Our
operationalisation; docs/analyses.md. :func:`score_generated` scores instead the exact ids an
LLM policy generated, which records keep per turn (``turn_tokens``): under the generating model
it gives back the log-probs recorded at generation.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from multiturn_envs.episode import EnvMaker
from multiturn_envs.harness.bootstrap import DEFAULT_N_BOOT, Interval, ratio_interval
from multiturn_envs.harness.records import RunFile
from multiturn_envs.harness.replay import EnvFactory, Replay
from multiturn_envs.policies.conversation import DEFAULT_SYSTEM_PROMPT
from multiturn_envs.policies.scoring import ScoringModel, TrajectoryText, ensure_comparable
from multiturn_envs.policies.token_sequences import (
    ScoringSequence,
    replies_from_tokens,
    trajectory_sequences,
)

__all__ = [
    "GROUPS",
    "LLRSummary",
    "LLRTrajectory",
    "NLLSummary",
    "ScoredTrajectory",
    "action_nll",
    "env_factory_of",
    "format_llr",
    "format_nll",
    "llr_pairs",
    "pair_llr",
    "replay_trajectories",
    "run_label",
    "score_generated",
    "score_run",
    "trajectory_llr",
]

GROUPS: tuple[str, ...] = ("all", "success", "failure")


def replay_trajectories(
    make_env: EnvFactory, records: Iterable[Mapping[str, Any]], check_rewards: bool = True
) -> list[TrajectoryText]:
    """Rebuild the conversation of every record by replaying it (:mod:`.replay`).

    With ``check_rewards`` a record the replay does not reproduce (another env, options or
    seed) is a :class:`~multiturn_envs.errors.ReplayError` instead of actions scored in a
    context the policy never saw.
    """
    out: list[TrajectoryText] = []
    with Replay(make_env, check=check_rewards) as replay:
        for episode in replay.episodes(records):
            systems: list[str] = []
            for _ in episode.turns():
                systems.append(episode.base.system_prompt() or DEFAULT_SYSTEM_PROMPT)
            messages, index = episode.conversation()
            out.append(
                TrajectoryText(
                    task_id=episode.task_id,
                    sample=int(episode.record.get("sample", episode.number)),
                    success=bool(episode.record.get("success")),
                    messages=messages,
                    systems=systems,
                    action_index=index,
                )
            )
    return out


def _score_texts(model: ScoringModel, texts: Sequence[TrajectoryText]) -> list[ScoredTrajectory]:
    scored = model.score(texts)
    return [ScoredTrajectory(t.task_id, t.sample, t.success, s) for t, s in zip(texts, scored)]


def llr_pairs(
    a: ScoringModel, b: ScoringModel, run: RunFile, make_env: EnvFactory | None = None
) -> list[LLRTrajectory]:
    """Every trajectory of ``run`` replayed once and scored under A and under B (refused when
    the two models do not share engine and dtype)."""
    ensure_comparable(a, b)
    texts = replay_trajectories(make_env or env_factory_of(run), run.records)
    scored_a = _score_texts(a, texts)
    return pair_llr(scored_a, scored_a if b is a else _score_texts(b, texts))


# ---------------------------------------------------------------------------------- estimates
@dataclass(frozen=True)
class ScoredTrajectory:
    """One trajectory's action log-probs under one model."""

    task_id: str
    sample: int
    success: bool
    token_logprobs: list[list[float]]

    @property
    def action_logprobs(self) -> list[float]:
        return [float(sum(a)) for a in self.token_logprobs]

    @property
    def logprob(self) -> float:
        """log p(all actions of the trajectory | their contexts)."""
        return float(sum(self.action_logprobs))


def score_run(
    model: ScoringModel, run: RunFile, make_env: EnvFactory | None = None
) -> list[ScoredTrajectory]:
    """Replay every trajectory of ``run`` and score its actions under ``model``."""
    return _score_texts(model, replay_trajectories(make_env or env_factory_of(run), run.records))


def score_generated(model: ScoringModel, run: RunFile) -> list[ScoredTrajectory]:
    """Score every trajectory of ``run`` on the exact token ids its policy generated.

    Where :func:`score_run` re-tokenises the action texts (so that two models score the same
    thing), this rebuilds each trajectory's sequences from the record's ``turn_tokens``
    (:func:`~multiturn_envs.policies.token_sequences.replies_from_tokens`), raw completions and
    template tokens included, with no replay. Under the model that generated the run it gives
    back the recorded ``turn_tokens[t]["logprobs"]`` (the check that what is scored is exactly
    what was generated); a record without token ids is a ``ValueError`` naming it.
    """
    sequences: list[ScoringSequence] = []
    counts: list[int] = []
    for number, record in enumerate(run.records):
        tokens = record.get("turn_tokens")
        if tokens is None:
            raise ValueError(
                f"record {number} ({record.get('task_id')}) has no turn_tokens: its policy gave "
                "no token ids; score its action texts with score_run"
            )
        seqs = trajectory_sequences(replies_from_tokens(record["actions"], tokens))
        sequences.extend(seqs)
        counts.append(len(seqs))
    scored = model.scorer.score(sequences) if sequences else []
    out: list[ScoredTrajectory] = []
    position = 0
    for record, n in zip(run.records, counts):
        per_action = [
            [float(x) for x in span] for seq in scored[position : position + n] for span in seq
        ]
        position += n
        out.append(
            ScoredTrajectory(
                str(record["task_id"]), int(record["sample"]), bool(record["success"]), per_action
            )
        )
    return out


def env_factory_of(run: RunFile) -> EnvFactory:
    """``gym.make`` of the env a record file was made with (its header's ``env_id`` and kwargs)."""
    config = run.config

    return EnvMaker(str(config["env_id"]), dict(config.get("env_kwargs") or {}))


def _by_task(
    items: Sequence[tuple[str, float, float]],
) -> tuple[np.ndarray, np.ndarray]:
    nums: dict[str, float] = defaultdict(float)
    dens: dict[str, float] = defaultdict(float)
    for task, num, den in items:
        nums[task] += num
        dens[task] += den
    tasks = sorted(nums)
    return np.array([nums[t] for t in tasks]), np.array([dens[t] for t in tasks])


def _in_group(traj: ScoredTrajectory, group: str) -> bool:
    return group == "all" or (traj.success if group == "success" else not traj.success)


@dataclass(frozen=True)
class NLLSummary:
    """Action NLL of one run's actions (one group of its trajectories) under one model.

    Attributes:
        per_token: total NLL of the action tokens / number of action tokens (nats).
        per_action: total NLL / number of actions (nats per action).
        n_tasks, n_trajectories, n_actions, n_tokens: what was pooled.
    """

    label: str
    model: str
    group: str
    n_tasks: int
    n_trajectories: int
    n_actions: int
    n_tokens: int
    per_token: Interval
    per_action: Interval

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["per_token"] = self.per_token.to_dict()
        out["per_action"] = self.per_action.to_dict()
        return out


def action_nll(
    scored: Sequence[ScoredTrajectory],
    label: str = "",
    model: str = "",
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> dict[str, NLLSummary]:
    """Per group (``all``, ``success``, ``failure``) the action NLL per token and per action."""
    out = {}
    for group in GROUPS:
        chosen = [t for t in scored if _in_group(t, group)]
        tok = _by_task(
            [
                (t.task_id, -sum(map(sum, t.token_logprobs)), sum(map(len, t.token_logprobs)))
                for t in chosen
            ]
        )
        act = _by_task([(t.task_id, -t.logprob, float(len(t.token_logprobs))) for t in chosen])
        out[group] = NLLSummary(
            label=label,
            model=model,
            group=group,
            n_tasks=len({t.task_id for t in chosen}),
            n_trajectories=len(chosen),
            n_actions=int(act[1].sum()),
            n_tokens=int(tok[1].sum()),
            per_token=ratio_interval(*tok, n_boot=n_boot, alpha=alpha, seed=seed),
            per_action=ratio_interval(*act, n_boot=n_boot, alpha=alpha, seed=seed),
        )
    return out


@dataclass(frozen=True)
class LLRTrajectory:
    """One trajectory's cumulative LLR ``log p_A - log p_B`` over its actions."""

    task_id: str
    sample: int
    success: bool
    n_actions: int
    logprob_a: float
    logprob_b: float

    @property
    def llr(self) -> float:
        return self.logprob_a - self.logprob_b


@dataclass(frozen=True)
class LLRSummary:
    """Cumulative LLR of one run's trajectories (one group), ``A - B``.

    Attributes:
        mean: mean over trajectories of the cumulative LLR (nats), interval over tasks.
        per_action: total LLR / number of actions (nats per action).
        median: median over trajectories (no interval).
    """

    label: str
    model_a: str
    model_b: str
    group: str
    n_tasks: int
    n_trajectories: int
    n_actions: int
    mean: Interval
    per_action: Interval
    median: float

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["mean"] = self.mean.to_dict()
        out["per_action"] = self.per_action.to_dict()
        out["median"] = None if math.isnan(self.median) else self.median
        return out


def pair_llr(a: Sequence[ScoredTrajectory], b: Sequence[ScoredTrajectory]) -> list[LLRTrajectory]:
    """Join the same trajectories scored under A and under B (same order, same actions)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} trajectories scored under A but {len(b)} under B")
    out = []
    for x, y in zip(a, b):
        if (x.task_id, x.sample) != (y.task_id, y.sample) or len(x.token_logprobs) != len(
            y.token_logprobs
        ):
            raise ValueError(f"trajectory {x.task_id}/{x.sample} differs between A and B")
        out.append(
            LLRTrajectory(
                x.task_id, x.sample, x.success, len(x.token_logprobs), x.logprob, y.logprob
            )
        )
    return out


def trajectory_llr(
    pairs: Sequence[LLRTrajectory],
    label: str = "",
    model_a: str = "",
    model_b: str = "",
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> dict[str, LLRSummary]:
    """Per group (``all``, ``success``, ``failure``): mean cumulative LLR and LLR per action."""
    out = {}
    for group in GROUPS:
        chosen = [p for p in pairs if group == "all" or p.success == (group == "success")]
        mean = _by_task([(p.task_id, p.llr, 1.0) for p in chosen])
        per_action = _by_task([(p.task_id, p.llr, float(p.n_actions)) for p in chosen])
        out[group] = LLRSummary(
            label=label,
            model_a=model_a,
            model_b=model_b,
            group=group,
            n_tasks=len({p.task_id for p in chosen}),
            n_trajectories=len(chosen),
            n_actions=sum(p.n_actions for p in chosen),
            mean=ratio_interval(*mean, n_boot=n_boot, alpha=alpha, seed=seed),
            per_action=ratio_interval(*per_action, n_boot=n_boot, alpha=alpha, seed=seed),
            median=float(np.median([p.llr for p in chosen])) if chosen else math.nan,
        )
    return out


# ---------------------------------------------------------------------------------- tables
def _fmt(interval: Interval) -> str:
    return interval.format(percent=False)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def run_label(run: RunFile) -> str:
    return f"{run.config.get('policy')} [{run.path}]"


def format_nll(
    summaries: Sequence[Mapping[str, NLLSummary]], model: ScoringModel, alpha: float, n_boot: int
) -> str:
    """The table ``multiturn-envs nll`` prints."""
    head = (
        f"Action NLL under {model.name} ({model.engine}, {model.dtype}); nats; "
        f"{100 * (1 - alpha):g}% CI over tasks (B={n_boot})"
    )
    rows = []
    for per_group in summaries:
        for group in GROUPS:
            s = per_group[group]
            rows.append(
                [
                    s.label,
                    group,
                    str(s.n_trajectories),
                    str(s.n_actions),
                    str(s.n_tokens),
                    _fmt(s.per_token),
                    _fmt(s.per_action),
                ]
            )
    cols = ["run", "group", "trajectories", "actions", "tokens", "NLL/token", "NLL/action"]
    return "\n".join([head, *_table(cols, rows)])


def format_llr(
    summaries: Sequence[Mapping[str, LLRSummary]],
    a: ScoringModel,
    b: ScoringModel,
    alpha: float,
    n_boot: int,
) -> str:
    """The table ``multiturn-envs llr`` prints."""
    head = (
        f"Cumulative LLR log p_A - log p_B over each trajectory's actions; A = {a.name}, "
        f"B = {b.name} ({a.engine}, {a.dtype}); nats; {100 * (1 - alpha):g}% CI over tasks "
        f"(B={n_boot})"
    )
    rows = []
    for per_group in summaries:
        for group in GROUPS:
            s = per_group[group]
            median = "n/a" if math.isnan(s.median) else f"{s.median:.3f}"
            rows.append(
                [
                    s.label,
                    group,
                    str(s.n_trajectories),
                    str(s.n_actions),
                    _fmt(s.mean),
                    median,
                    _fmt(s.per_action),
                ]
            )
    cols = ["run", "group", "trajectories", "actions", "mean LLR", "median", "LLR/action"]
    return "\n".join([head, *_table(cols, rows)])
