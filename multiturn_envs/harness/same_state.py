"""Same-state comparison: two policies' actions at the same exact states, scored by the oracle.

From one exact snapshot, each of two policies samples ``N`` actions; the env's oracle
(``score_action``) scores every action; the verdict is reported per state (means with an
``epsilon`` margin: win / tie / loss) and over the ``N x N`` action pairs (ties counted 1/2),
with bootstrap intervals over states. Snapshots come from recorded trajectories
(:func:`states_from_records`, through :mod:`.replay`) or are given directly.

Nothing here knows about a particular env: it needs ``score_action``, ``get_state`` /
``set_state`` and ``messages``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.core import TextEnv
from multiturn_envs.harness.bootstrap import DEFAULT_N_BOOT, Interval, intervals
from multiturn_envs.harness.replay import EnvFactory, Replay
from multiturn_envs.policies.base import PolicyCaller, TurnRequest, as_policy
from multiturn_envs.wrappers import text_env_of

__all__ = [
    "ComparisonResult",
    "StateComparison",
    "StateSnapshot",
    "same_state_comparison",
    "states_from_records",
]

_COMPARISON_STREAM = 0x55C  # keeps the comparison's action seeds apart from any run's seeds


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


def states_from_records(
    make_env: EnvFactory,
    records: Iterable[Mapping[str, Any]],
    turns: Sequence[int] | None = None,
    check_rewards: bool = True,
) -> list[StateSnapshot]:
    """Rebuild exact snapshots along recorded trajectories by replaying them (:mod:`.replay`).

    Each record is a dict as the runner writes it (``task_id``, ``seed``, ``actions``; its
    budget and error injection are put back on the replay, since the finite-horizon oracle
    depends on the turns left). With ``check_rewards`` a replay that does not reproduce the
    record is a :class:`~multiturn_envs.errors.ReplayError` (a ``ValueError``) instead of wrong
    states.

    Args:
        make_env: builds a fresh env (the same one the records were made with).
        records: the trajectories.
        turns: which states to take, as the number of agent turns already played (0 is the
            first observation); default every state at which the recorded policy acted.
        check_rewards: verify the replay against the record (:mod:`.replay`'s checks).
    """
    wanted = None if turns is None else sorted({int(t) for t in turns})
    if wanted is not None and wanted and wanted[0] < 0:
        raise ValueError(f"turns must be >= 0, got {wanted[0]}")
    if wanted == []:
        return []
    chosen = None if wanted is None else set(wanted)
    snapshots: list[StateSnapshot] = []
    with Replay(make_env, check=check_rewards) as replay:
        for episode in replay.episodes(records):
            origin = f"record:{episode.task_id}/{episode.record.get('sample', episode.number)}"
            upto = None if wanted is None else wanted[-1]
            for t in episode.turns(upto=upto):
                if chosen is None or t in chosen:
                    snapshots.append(
                        StateSnapshot(episode.base.get_state(), episode.task_id, t, origin)
                    )
    return snapshots


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
    live = env if isinstance(env, gym.Env) else env()
    results: list[StateComparison] = []
    callers = (PolicyCaller(pol_a), PolicyCaller(pol_b))
    try:
        base = text_env_of(live)
        for index, snap in enumerate(snapshots):
            picked: list[list[str]] = []
            for which, caller in enumerate(callers):
                base.set_state(snap.state)
                messages = base.messages()
                requests = [
                    TurnRequest(messages=messages, env=base, seed=s, episode_id=f"state/{index}")
                    for s in _request_seeds(seed, index, which, n_actions)
                ]
                picked.append([reply.text for reply in caller(requests)])
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
        for caller in callers:
            caller.close()
        if owned:
            live.close()
    outcomes = np.array([s.outcome for s in results])
    pairs = np.array([s.pairs for s in results], dtype=np.float64)
    columns = {
        "mean_score_a": np.array([s.mean_a for s in results]),
        "mean_score_b": np.array([s.mean_b for s in results]),
        "mean_score_diff": np.array([s.mean_a - s.mean_b for s in results]),
        "win_rate": (outcomes == "win").astype(float),
        "tie_rate": (outcomes == "tie").astype(float),
        "loss_rate": (outcomes == "loss").astype(float),
        # NaN at tied states: the NaN-ignoring bootstrap mean is then wins / (wins + losses).
        "better_rate_excluding_ties": np.where(outcomes == "tie", np.nan, outcomes == "win"),
        "pair_score": np.array([s.pair_score for s in results]),
        "pair_win_rate": np.array([s.pair_wins for s in results]) / pairs,
        "pair_tie_rate": np.array([s.pair_ties for s in results]) / pairs,
        "pair_loss_rate": np.array([s.pair_losses for s in results]) / pairs,
    }
    ci = intervals(columns, n_boot, alpha, seed)
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
