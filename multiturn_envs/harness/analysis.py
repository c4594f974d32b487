"""Step-quality analyses generic over any TextEnv with oracle hooks.

* :func:`same_state_comparison`: from one exact snapshot, each of two policies samples ``N``
  actions; the env's oracle (``score_action``) scores every action; the verdict is reported per
  state (means with an ``epsilon`` margin: win / tie / loss) and over the ``N x N`` action pairs
  (ties counted 1/2), with bootstrap intervals over states. Snapshots come from recorded
  trajectories (:func:`states_from_records` replays ``reset(seed, task)`` plus the recorded
  actions) or are given directly.
* :func:`error_state_continuation`: episodes started in an error state by
  :class:`multiturn_envs.wrappers.ErrorInjection` (``k`` expert steps, one wrong action); the
  success rate of the policy's continuation, with a bootstrap interval over tasks. The episodes
  run through the reference runner (:func:`multiturn_envs.harness.rollout.run_eval`), so they
  get the same seeds, records and batching as any evaluation.

Nothing here knows about a particular env: it needs ``score_action``, ``get_state`` /
``set_state``, ``messages`` and, for error states, ``expert_action`` / ``error_action``.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.core import TextEnv
from multiturn_envs.harness.bootstrap import DEFAULT_N_BOOT, bootstrap_ci, bootstrap_indices
from multiturn_envs.harness.passk import PassSurface, pass_surface_from_first_success
from multiturn_envs.policies.base import AsyncPolicy, Policy, Reply, TurnRequest, as_policy
from multiturn_envs.wrappers import ErrorInjection, TurnBudget, text_env_of

EnvFactory = Callable[[], gym.Env[str, str]]
_COMPARISON_STREAM = 0x55C  # keeps the comparison's action seeds apart from any run's seeds


# ---------------------------------------------------------------------- small result types
@dataclass(frozen=True)
class Interval:
    """A point estimate with a percentile bootstrap interval (``NaN`` when undefined)."""

    estimate: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float | None]:
        return {k: (None if math.isnan(v) else v) for k, v in self.__dict__.items()}

    def format(self, percent: bool = True) -> str:
        if math.isnan(self.estimate):
            return "n/a"
        scale, spec, unit = (100.0, ".1f", "%") if percent else (1.0, ".3f", "")
        point = f"{scale * self.estimate:{spec}}{unit}"
        if math.isnan(self.low) or math.isnan(self.high):  # e.g. a group with one task
            return f"{point} [no interval]"
        return f"{point} [{scale * self.low:{spec}}, {scale * self.high:{spec}}]"


def _intervals(
    columns: Mapping[str, np.ndarray], n_boot: int, alpha: float, seed: int | None
) -> dict[str, Interval]:
    """One interval per column, all from ONE index set over the units (rows)."""
    names = list(columns)
    matrix = np.stack([np.asarray(columns[n], dtype=np.float64) for n in names], axis=1)
    indices = bootstrap_indices(matrix.shape[0], n_boot, seed)
    ci = bootstrap_ci(matrix, alpha=alpha, seed=seed, indices=indices)
    return {
        name: Interval(float(ci.estimate[i]), float(ci.low[i]), float(ci.high[i]))
        for i, name in enumerate(names)
    }


# ---------------------------------------------------------------------- snapshots
@dataclass(frozen=True)
class StateSnapshot:
    """An exact env state to compare policies at.

    Attributes:
        state: what ``TextEnv.get_state`` returned.
        task_id: the task of the state.
        turn: agent turns taken before this state (0: the first observation).
        origin: where it came from (``"record:<task>/<sample>"`` or ``"given:<i>"``).
    """

    state: dict[str, Any]
    task_id: str | None = None
    turn: int | None = None
    origin: str = ""


def _field(record: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if isinstance(record, Mapping) and name in record:
            return record[name]
        if not isinstance(record, Mapping) and hasattr(record, name):
            return getattr(record, name)
    return default


def _has_error_injection(env: gym.Env[Any, Any]) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, ErrorInjection):
            return True
        env = env.env
    return False


def states_from_records(
    make_env: EnvFactory,
    records: Iterable[Any],
    turns: Sequence[int] | None = None,
    check_rewards: bool = True,
) -> list[StateSnapshot]:
    """Rebuild exact snapshots along recorded trajectories by replaying them.

    Each record (a dict as the runner writes it, or an object with the same attributes) needs
    ``task_id``, ``seed`` and ``actions``; ``max_turns`` and ``budget_mode`` put the same budget
    on the replay (the finite-horizon oracle depends on the turns left), and a non-null
    ``error_injection`` replays the same injected prefix. The replay is
    ``reset(seed=seed, options={"task_id": task})`` followed by the recorded actions; with
    ``check_rewards`` the replayed rewards must equal the recorded ``rewards`` (a diverging replay
    raises ``ValueError`` instead of yielding wrong states).

    Args:
        make_env: builds a fresh env (the same one the records were made with).
        records: the trajectories.
        turns: which states to take, as the number of agent turns already played (0 is the
            first observation); default every state at which the recorded policy acted.
        check_rewards: verify the replay against the recorded rewards.
    """
    wanted = None if turns is None else sorted({int(t) for t in turns})
    if wanted is not None and wanted and wanted[0] < 0:
        raise ValueError(f"turns must be >= 0, got {wanted[0]}")
    if wanted == []:
        return []
    snapshots: list[StateSnapshot] = []
    raw = make_env()
    try:
        text_env_of(raw)
        stacks: dict[tuple[Any, ...], gym.Env[str, str]] = {}
        for number, record in enumerate(records):
            task_id = _field(record, "task_id", "task")
            seed = _field(record, "seed")
            actions = _field(record, "actions")
            if task_id is None or actions is None:
                raise ValueError(f"record {number} lacks 'task_id' or 'actions'")
            task_id = str(task_id)
            max_turns = _field(record, "max_turns")
            mode = _field(record, "budget_mode", default="hidden")
            injection = _field(record, "error_injection")
            k = None if not injection else int(injection["after_expert_steps"])
            key = (max_turns, mode, k)
            if key not in stacks:
                env: gym.Env[str, str] = raw
                if max_turns is not None:
                    env = TurnBudget(env, int(max_turns), str(mode))
                if k is not None and not _has_error_injection(raw):
                    env = ErrorInjection(env, after_expert_steps=k)
                stacks[key] = env
            env = stacks[key]
            base = text_env_of(env)
            _, info = env.reset(seed=seed, options={"task_id": task_id})
            if injection and check_rewards:
                expected = list(injection.get("injected_actions") or [])
                if expected and list(info.get("injected_actions", [])) != expected:
                    raise ValueError(
                        f"record {number} ({task_id}): the replayed error injection differs "
                        "from the recorded one; was it made with another env or seed?"
                    )
            origin = f"record:{task_id}/{_field(record, 'sample', default=number)}"
            rewards = _field(record, "rewards")
            last = len(actions) - 1 if wanted is None else min(max(wanted), len(actions) - 1)
            for t, action in enumerate(actions):
                if t > last:
                    break
                if wanted is None or t in wanted:
                    snapshots.append(StateSnapshot(base.get_state(), task_id, t, origin))
                _, reward, terminated, truncated, _ = env.step(action)
                if check_rewards and rewards is not None and float(reward) != float(rewards[t]):
                    raise ValueError(
                        f"record {number} ({task_id}): replay diverged at turn {t + 1} "
                        f"(reward {reward} vs recorded {rewards[t]}); was it made with "
                        "another env, options or seed?"
                    )
                if (terminated or truncated) and t < len(actions) - 1:
                    raise ValueError(
                        f"record {number} ({task_id}): the replay ended at turn {t + 1} but "
                        f"the record has {len(actions)} actions"
                    )
    finally:
        raw.close()
    return snapshots


# ---------------------------------------------------------------------- same-state comparison
@dataclass(frozen=True)
class StateComparison:
    """The verdict at one state (A's point of view).

    ``outcome`` compares the mean scores with the margin ``epsilon``; ``pair_*`` count the
    ``N_a x N_b`` action pairs (a pair ties when its scores differ by at most ``epsilon``);
    ``pair_score`` = (pair wins + pair ties / 2) / pairs.
    """

    index: int
    task_id: str | None
    turn: int | None
    origin: str
    actions_a: list[str]
    actions_b: list[str]
    scores_a: list[float]
    scores_b: list[float]
    mean_a: float
    mean_b: float
    outcome: str
    pair_wins: int
    pair_ties: int
    pair_losses: int

    @property
    def pairs(self) -> int:
        return self.pair_wins + self.pair_ties + self.pair_losses

    @property
    def pair_score(self) -> float:
        return (self.pair_wins + 0.5 * self.pair_ties) / self.pairs

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["pair_score"] = self.pair_score
        return out


@dataclass(frozen=True)
class ComparisonResult:
    """Same-state comparison of policy A against policy B over many states.

    Per-state rates (``win_rate`` ...) count states whose mean scores differ by more than
    ``epsilon``; ``better_rate_excluding_ties`` is wins / (wins + losses). Pair rates average the
    per-state pair fractions. Every interval is a percentile bootstrap over states, all from one
    index set.
    """

    policy_a: str
    policy_b: str
    n_actions: int
    epsilon: float
    alpha: float
    n_boot: int
    seed: int
    states: list[StateComparison]
    mean_score_a: Interval
    mean_score_b: Interval
    mean_score_diff: Interval
    win_rate: Interval
    tie_rate: Interval
    loss_rate: Interval
    better_rate_excluding_ties: Interval
    pair_score: Interval
    pair_win_rate: Interval
    pair_tie_rate: Interval
    pair_loss_rate: Interval

    @property
    def n_states(self) -> int:
        return len(self.states)

    def counts(self) -> dict[str, int]:
        """How many states A won, tied and lost."""
        out = {"win": 0, "tie": 0, "loss": 0}
        for s in self.states:
            out[s.outcome] += 1
        return out

    _SUMMARY = (
        "mean_score_a",
        "mean_score_b",
        "mean_score_diff",
        "win_rate",
        "tie_rate",
        "loss_rate",
        "better_rate_excluding_ties",
        "pair_score",
        "pair_win_rate",
        "pair_tie_rate",
        "pair_loss_rate",
    )

    def to_dict(self, include_states: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "same_state_comparison",
            "policy_a": self.policy_a,
            "policy_b": self.policy_b,
            "n_states": self.n_states,
            "n_actions": self.n_actions,
            "epsilon": self.epsilon,
            "alpha": self.alpha,
            "n_boot": self.n_boot,
            "seed": self.seed,
            "counts": self.counts(),
        }
        for name in self._SUMMARY:
            out[name] = getattr(self, name).to_dict()
        if include_states:
            out["states"] = [s.to_dict() for s in self.states]
        return out

    def format(self) -> str:
        """A plain-text table for reports and the CLI."""
        level = f"{100 * (1 - self.alpha):g}%"
        c = self.counts()
        lines = [
            f"same-state comparison: A={self.policy_a} vs B={self.policy_b}",
            f"{self.n_states} states x {self.n_actions} actions each, epsilon={self.epsilon:g}, "
            f"{level} bootstrap CI over states",
            f"  states won / tied / lost by A      {c['win']} / {c['tie']} / {c['loss']}",
            f"  mean oracle score A                {self.mean_score_a.format(False)}",
            f"  mean oracle score B                {self.mean_score_b.format(False)}",
            f"  mean score A - B                   {self.mean_score_diff.format(False)}",
            f"  A better (per state, ties=not)     {self.win_rate.format()}",
            f"  tie (per state)                    {self.tie_rate.format()}",
            f"  A worse (per state)                {self.loss_rate.format()}",
            f"  A better among non-tied states     {self.better_rate_excluding_ties.format()}",
            f"  A beats B over pairs (ties = 1/2)  {self.pair_score.format()}",
            f"  pairs won / tied / lost            {self.pair_win_rate.format()} / "
            f"{self.pair_tie_rate.format()} / {self.pair_loss_rate.format()}",
        ]
        return "\n".join(lines)


def _act(policy: Policy | AsyncPolicy, requests: Sequence[TurnRequest]) -> list[str]:
    if hasattr(policy, "act"):
        replies: Sequence[Reply | str] = policy.act(requests)  # type: ignore[union-attr]
    else:
        replies = asyncio.run(policy.aact(requests))  # type: ignore[union-attr]
    if len(replies) != len(requests):
        raise RuntimeError(
            f"policy {policy.name!r} returned {len(replies)} replies for {len(requests)} requests"
        )
    texts = []
    for reply in replies:
        text = reply if isinstance(reply, str) else reply.text
        if not isinstance(text, str):
            raise TypeError(f"policy {policy.name!r} replied {type(text).__name__}, not str")
        texts.append(text)
    return texts


def _as_snapshots(states: Iterable[StateSnapshot | Mapping[str, Any]]) -> list[StateSnapshot]:
    out = []
    for i, s in enumerate(states):
        if isinstance(s, StateSnapshot):
            out.append(s)
        elif isinstance(s, Mapping) and "env" in s and "rng" in s:
            out.append(StateSnapshot(dict(s), s.get("task_id"), s.get("turn"), f"given:{i}"))
        else:
            raise TypeError(
                f"state {i} is neither a StateSnapshot nor a TextEnv.get_state() dict: {s!r:.80}"
            )
    if not out:
        raise ValueError("no states to compare")
    return out


def _score_all(base: TextEnv, snapshot: dict[str, Any], actions: Sequence[str]) -> list[float]:
    scores = []
    for action in actions:
        base.set_state(snapshot)
        score = float(base.score_action(action))
        if not 0.0 <= score <= 1.0 or math.isnan(score):
            raise ValueError(f"score_action returned {score} for {action!r:.60}, not in [0, 1]")
        scores.append(score)
    return scores


def _request_seeds(seed: int, state_index: int, policy_index: int, n: int) -> list[int]:
    seq = np.random.SeedSequence(
        entropy=seed, spawn_key=(_COMPARISON_STREAM, state_index, policy_index)
    )
    return [int(w) for w in seq.generate_state(n, dtype=np.uint64)]


def same_state_comparison(
    env: gym.Env[str, str] | EnvFactory,
    states: Iterable[StateSnapshot | Mapping[str, Any]],
    policy_a: Any,
    policy_b: Any,
    n_actions: int = 16,
    seed: int = 0,
    epsilon: float = 1e-6,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
) -> ComparisonResult:
    """Compare two policies' actions at the same exact states with the env's oracle.

    At every state the env is restored to the snapshot, each policy gets ``n_actions``
    :class:`TurnRequest` s (same conversation, distinct seeds, a separate seed stream per
    policy) in ONE ``act`` call, and ``score_action`` scores each reply at that state.

    Args:
        env: an env, or a factory that makes one (closed afterwards).
        states: snapshots (:func:`states_from_records`, or ``get_state()`` dicts).
        policy_a, policy_b: policies (or plain callables, adapted).
        n_actions: actions per policy per state (the study uses 16).
        seed: derives every request seed; the same seed gives the same result.
        epsilon: margin for ties, both for per-state means and for single pairs.
        n_boot, alpha: the bootstrap over states.
    """
    if isinstance(n_actions, bool) or not isinstance(n_actions, int) or n_actions < 1:
        raise ValueError(f"n_actions must be a positive int, got {n_actions!r}")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    snapshots = _as_snapshots(states)
    pol_a, pol_b = as_policy(policy_a), as_policy(policy_b)
    owned = not isinstance(env, gym.Env)
    live = env() if owned else env  # type: ignore[operator]
    results: list[StateComparison] = []
    try:
        base = text_env_of(live)
        for index, snap in enumerate(snapshots):
            picked: list[list[str]] = []
            for which, policy in enumerate((pol_a, pol_b)):
                base.set_state(snap.state)
                messages = base.messages()
                requests = [
                    TurnRequest(messages=messages, env=base, seed=s, episode_id=f"state/{index}")
                    for s in _request_seeds(seed, index, which, n_actions)
                ]
                picked.append(_act(policy, requests))
            scores_a = _score_all(base, snap.state, picked[0])
            scores_b = _score_all(base, snap.state, picked[1])
            base.set_state(snap.state)
            sa, sb = np.asarray(scores_a), np.asarray(scores_b)
            gap = sa[:, None] - sb[None, :]
            mean_a, mean_b = float(sa.mean()), float(sb.mean())
            diff = mean_a - mean_b
            outcome = "win" if diff > epsilon else "loss" if diff < -epsilon else "tie"
            results.append(
                StateComparison(
                    index=index,
                    task_id=snap.task_id,
                    turn=snap.turn,
                    origin=snap.origin,
                    actions_a=picked[0],
                    actions_b=picked[1],
                    scores_a=scores_a,
                    scores_b=scores_b,
                    mean_a=mean_a,
                    mean_b=mean_b,
                    outcome=outcome,
                    pair_wins=int(np.sum(gap > epsilon)),
                    pair_ties=int(np.sum(np.abs(gap) <= epsilon)),
                    pair_losses=int(np.sum(gap < -epsilon)),
                )
            )
    finally:
        if owned:
            live.close()
    outcome = np.array([s.outcome for s in results])
    pairs = np.array([s.pairs for s in results], dtype=np.float64)
    columns = {
        "mean_score_a": np.array([s.mean_a for s in results]),
        "mean_score_b": np.array([s.mean_b for s in results]),
        "mean_score_diff": np.array([s.mean_a - s.mean_b for s in results]),
        "win_rate": (outcome == "win").astype(float),
        "tie_rate": (outcome == "tie").astype(float),
        "loss_rate": (outcome == "loss").astype(float),
        # NaN at tied states: the NaN-ignoring bootstrap mean is then wins / (wins + losses).
        "better_rate_excluding_ties": np.where(outcome == "tie", np.nan, outcome == "win"),
        "pair_score": np.array([s.pair_score for s in results]),
        "pair_win_rate": np.array([s.pair_wins for s in results]) / pairs,
        "pair_tie_rate": np.array([s.pair_ties for s in results]) / pairs,
        "pair_loss_rate": np.array([s.pair_losses for s in results]) / pairs,
    }
    ci = _intervals(columns, n_boot, alpha, seed)
    return ComparisonResult(
        policy_a=pol_a.name,
        policy_b=pol_b.name,
        n_actions=n_actions,
        epsilon=float(epsilon),
        alpha=alpha,
        n_boot=n_boot,
        seed=seed,
        states=results,
        **ci,
    )


# ---------------------------------------------------------------------- error-state continuation
@dataclass(frozen=True)
class ContinuationResult:
    """Success of a policy continuing from injected error states.

    ``success_rate`` is the mean over tasks of each task's success share (tasks weigh equally,
    as in Pass@k), with a percentile bootstrap over tasks. ``skipped_tasks`` lists tasks where
    no error state could be reached (too short for ``k`` expert steps) and why.
    """

    policy: str
    k_after_expert: int
    samples: int
    max_turns: int
    seed: int
    alpha: float
    n_boot: int
    success_rate: Interval
    per_task_success: dict[str, float]
    skipped_tasks: dict[str, str]
    episodes: list[dict[str, Any]] = field(repr=False)

    @property
    def n_episodes(self) -> int:
        return len(self.episodes)

    def surface(self) -> PassSurface:
        """Pass@(K,T) of the continuation (T counts the policy's turns after the error)."""
        turns: dict[str, list[int | None]] = {task: [] for task in self.per_task_success}
        for ep in self.episodes:
            turns[ep["task_id"]].append(ep["first_success_turn"])
        return pass_surface_from_first_success(turns, t_max=self.max_turns)

    def to_dict(self, include_episodes: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "error_state_continuation",
            "policy": self.policy,
            "k_after_expert": self.k_after_expert,
            "samples": self.samples,
            "max_turns": self.max_turns,
            "seed": self.seed,
            "alpha": self.alpha,
            "n_boot": self.n_boot,
            "n_tasks": len(self.per_task_success),
            "n_episodes": self.n_episodes,
            "success_rate": self.success_rate.to_dict(),
            "per_task_success": dict(self.per_task_success),
            "skipped_tasks": dict(self.skipped_tasks),
        }
        if include_episodes:
            out["episodes"] = list(self.episodes)
        return out

    def format(self) -> str:
        level = f"{100 * (1 - self.alpha):g}%"
        lines = [
            f"error-state continuation: {self.policy}, error after {self.k_after_expert} "
            f"expert step(s), {self.max_turns} turns to recover",
            f"  {len(self.per_task_success)} tasks x {self.samples} samples "
            f"({self.n_episodes} episodes), {level} bootstrap CI over tasks",
            f"  success rate                       {self.success_rate.format()}",
        ]
        if self.skipped_tasks:
            lines.append(f"  skipped tasks (no error state)     {len(self.skipped_tasks)}")
        return "\n".join(lines)


def _probe_injection(
    make_env: EnvFactory, task_ids: Sequence[str], k: int, max_turns: int, seed: int
) -> dict[str, str]:
    """Tasks where ``k`` expert steps plus one error cannot leave a live state, with why."""
    skipped: dict[str, str] = {}
    raw = make_env()
    try:
        env = ErrorInjection(TurnBudget(raw, max_turns), after_expert_steps=k)
        for task in task_ids:
            try:
                env.reset(seed=seed, options={"task_id": task})
            except RuntimeError as exc:
                skipped[task] = str(exc)
    finally:
        raw.close()
    return skipped


def in_task_order(
    records: Iterable[Mapping[str, Any]], tasks: Sequence[str]
) -> list[Mapping[str, Any]]:
    """``records`` by task (in ``tasks``' order, unknown tasks last), sample, then budget.

    A record file's line order is schedule (an executor's shards, a resume), not meaning;
    analyses whose numbers follow a record's position (seeds, paired lists) take this order so
    that the same episodes give the same result however they were run.
    """
    order = {t: i for i, t in enumerate(tasks)}
    return sorted(
        records,
        key=lambda r: (order.get(r["task_id"], len(order)), int(r["sample"]), int(r["max_turns"])),
    )


def error_state_continuation(
    make_env: EnvFactory,
    policy: Any,
    task_ids: Sequence[str],
    k_after_expert: int,
    samples: int,
    max_turns: int,
    seed: int = 0,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    out: str | Path | None = None,
    in_flight: int = 64,
    executor: Any = None,
) -> ContinuationResult:
    """Run ``samples`` episodes per task from an injected error state; report the success rate.

    Every episode is ``ErrorInjection(TurnBudget(env, max_turns), after_expert_steps=k)``: ``k``
    expert actions and one ``error_action`` are played as history (not counted against the
    budget), then the policy has ``max_turns`` turns. Episodes run through the reference runner
    with a hidden budget, one batched policy call per turn.

    Args:
        make_env: builds a fresh (unwrapped or budget-free) env.
        policy: a policy or a plain callable.
        task_ids: the tasks; those too short for ``k`` are skipped and listed.
        k_after_expert: expert steps before the injected error.
        samples: episodes per task.
        max_turns: the policy's budget after the error.
        seed: the run seed (episode seeds derive from it and the task id).
        n_boot, alpha: the bootstrap over tasks.
        out: keep the trajectory records in this JSONL file (resumable); default a temp file.
        in_flight: episodes in flight (the largest policy batch).
        executor: where the episodes run, as for ``run_eval`` (``None``: here; a
            ``RayExecutor``: sharded over Ray workers, the same records).
    """
    from multiturn_envs.harness.records import read_run
    from multiturn_envs.harness.rollout import EvalConfig, run_eval

    if isinstance(k_after_expert, bool) or not isinstance(k_after_expert, int):
        raise TypeError(f"k_after_expert must be an int, got {k_after_expert!r}")
    tasks = [str(t) for t in task_ids]
    if not tasks:
        raise ValueError("error_state_continuation needs at least one task")
    pol = as_policy(policy)
    skipped = _probe_injection(make_env, tasks, k_after_expert, max_turns, seed)
    usable = [t for t in tasks if t not in skipped]
    if not usable:
        first = next(iter(skipped.values()))
        raise ValueError(f"no task admits an error after {k_after_expert} expert steps: {first}")
    probe = make_env()
    try:
        env_id = probe.spec.id if probe.spec is not None else type(probe.unwrapped).__name__
    finally:
        probe.close()
    config = EvalConfig(
        env_id=env_id,
        policy=pol.name,
        tasks=usable,
        samples=samples,
        max_turns=max_turns,
        budget_mode="hidden",
        error_after=k_after_expert,
        seed=seed,
    )
    with tempfile.TemporaryDirectory(prefix="mt-continuation-") as tmp:
        path = Path(out) if out is not None else Path(tmp) / "continuation.jsonl"
        run_eval(
            config,
            pol,
            str(path),
            in_flight=in_flight,
            progress=False,
            make_env=make_env,
            executor=executor,
        )
        records = read_run(path).records
    records = in_task_order(records, usable)
    by_task: dict[str, list[bool]] = {t: [] for t in usable}
    episodes = []
    for rec in records:
        if rec["task_id"] not in by_task:
            continue
        by_task[rec["task_id"]].append(bool(rec["success"]))
        injection = rec.get("error_injection") or {}
        episodes.append(
            {
                "task_id": rec["task_id"],
                "sample": rec["sample"],
                "seed": rec["seed"],
                "success": bool(rec["success"]),
                "first_success_turn": rec["first_success_turn"],
                "turns": rec["turns"],
                "injected_actions": injection.get("injected_actions"),
                "actions": rec["actions"],
            }
        )
    per_task = {t: float(np.mean(v)) for t, v in by_task.items() if v}
    ci = _intervals({"success_rate": np.array(list(per_task.values()))}, n_boot, alpha, seed)[
        "success_rate"
    ]
    return ContinuationResult(
        policy=pol.name,
        k_after_expert=k_after_expert,
        samples=samples,
        max_turns=max_turns,
        seed=seed,
        alpha=alpha,
        n_boot=n_boot,
        success_rate=ci,
        per_task_success=per_task,
        skipped_tasks=skipped,
        episodes=episodes,
    )


def continuation_difference(
    a: ContinuationResult,
    b: ContinuationResult,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """Paired bootstrap interval of ``success(A) - success(B)`` over their common tasks."""
    common = [t for t in a.per_task_success if t in b.per_task_success]
    if not common:
        raise ValueError("the two continuation results share no task")
    diff = np.array([a.per_task_success[t] - b.per_task_success[t] for t in common])
    return _intervals({"diff": diff}, n_boot, alpha, seed)["diff"]


def run_compare_cli(
    *,
    mode: str,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy_a: Any,
    policy_b: Any,
    tasks: Sequence[str],
    states_from: str | None,
    n_actions: int,
    samples: int,
    max_turns: int,
    error_after: int,
    seed: int,
    out: str | None,
    executors: tuple[Any, Any] = (None, None),
) -> str:
    """What ``multiturn-envs compare`` runs; returns the text to print, writes JSON to ``out``.

    ``same-state``: states from the trajectories in ``states_from`` (restricted to ``tasks``),
    or, without a record file, every state that policy A visits in ``samples`` hidden-budget
    episodes per task (our default: A is the reference whose states are probed).
    ``continuation``: both policies from the same injected error states, with the paired
    difference over tasks. User mistakes become the CLI's one-line errors. ``executors``: where
    policy A's and policy B's episodes run (``run_eval``'s ``executor``); the oracle scoring of
    same-state actions runs here.
    """
    import json

    from multiturn_envs.cli import UsageError
    from multiturn_envs.harness.records import RecordFileError, read_run

    def make_env() -> gym.Env[str, str]:
        return gym.make(env_id, **dict(env_kwargs))

    try:
        if mode == "same-state":
            if states_from is not None:
                wanted = set(tasks)
                records = [r for r in read_run(states_from).records if r["task_id"] in wanted]
                if not records:
                    raise ValueError(f"{states_from} holds no trajectory of the chosen tasks")
                source = f"trajectories of {states_from}"
            else:
                from multiturn_envs.harness.rollout import EvalConfig, run_eval

                pol = as_policy(policy_a)
                config = EvalConfig(
                    env_id=env_id,
                    policy=pol.name,
                    tasks=list(tasks),
                    samples=samples,
                    max_turns=max_turns,
                    seed=seed,
                    env_kwargs=dict(env_kwargs),
                )
                with tempfile.TemporaryDirectory(prefix="mt-states-") as tmp:
                    path = Path(tmp) / "states.jsonl"
                    run_eval(
                        config,
                        pol,
                        str(path),
                        progress=False,
                        make_env=make_env,
                        executor=executors[0],
                    )
                    records = read_run(path).records
                source = f"states visited by {pol.name} ({samples} episodes per task)"
            records = in_task_order(records, tasks)  # each state's seeds follow its position
            states = states_from_records(make_env, records)
            result = same_state_comparison(
                make_env, states, policy_a, policy_b, n_actions=n_actions, seed=seed
            )
            text = f"{result.format()}\n  states: {source}"
            payload: dict[str, Any] = result.to_dict()
        elif mode == "continuation":
            res = [
                error_state_continuation(
                    make_env, p, tasks, error_after, samples, max_turns, seed=seed, executor=ex
                )
                for p, ex in zip((policy_a, policy_b), executors)
            ]
            diff = continuation_difference(res[0], res[1], seed=seed)
            text = "\n".join(
                [
                    res[0].format(),
                    res[1].format(),
                    f"  success A - B (paired over tasks)  {diff.format()}",
                ]
            )
            payload = {"a": res[0].to_dict(), "b": res[1].to_dict(), "diff": diff.to_dict()}
        else:
            raise ValueError(f"unknown compare mode {mode!r}: same-state or continuation")
    except FileNotFoundError as exc:
        raise UsageError(f"no such record file: {exc.filename}") from None
    except (RecordFileError, ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    if out is not None:
        Path(out).write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
        text += f"\n  written: {out}"
    return text
