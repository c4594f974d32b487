"""Mechanism analyses: how likely one policy's actions are under another model.

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
(``reset(seed, task)`` plus the recorded actions, with the run's budget and error injection;
a replay whose rewards differ from the record's is an error). Each action is tokenised on its
own and closed with the model's EOS (:meth:`ChatPrompter.sequence_of`), and a whole trajectory
is ONE scoring sequence (one forward pass). Log-probs from different engines or dtypes differ
by up to ~0.3 nats per token (bf16 vLLM vs HF), far more than many effects measured here, so an
LLR refuses two scoring models that do not share engine and dtype
(:func:`ensure_comparable`).

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.harness.analysis import Interval
from multiturn_envs.harness.bootstrap import DEFAULT_N_BOOT, bootstrap_indices
from multiturn_envs.harness.records import RunFile, read_run
from multiturn_envs.policies.prompting import (
    DEFAULT_SYSTEM_PROMPT,
    ChatPrompter,
    ScoringSequence,
    build_conversation,
    replies_from_tokens,
    trajectory_sequences,
)
from multiturn_envs.policies.scoring import Scorer
from multiturn_envs.wrappers import ErrorInjection, TurnBudget, text_env_of

EnvFactory = Callable[[], gym.Env[str, str]]
GROUPS: tuple[str, ...] = ("all", "success", "failure")


# ---------------------------------------------------------------------------------- replay
@dataclass(frozen=True)
class TrajectoryText:
    """A recorded trajectory as the policy saw it.

    Attributes:
        task_id, sample, success: from the record.
        messages: the env's chat messages up to and including the last action (user,
            assistant, user, ...; an injected error prefix included as the env renders it).
        systems: the env's system prompt at each action (usually one string repeated).
        action_index: for each action, the index of its assistant message in ``messages``.
    """

    task_id: str
    sample: int
    success: bool
    messages: list[dict[str, str]]
    systems: list[str]
    action_index: list[int]

    @property
    def n_actions(self) -> int:
        return len(self.action_index)


def _budget_stack(raw: gym.Env[str, str], record: Mapping[str, Any]) -> gym.Env[str, str]:
    env: gym.Env[str, str] = raw
    if record.get("max_turns") is not None:
        env = TurnBudget(env, int(record["max_turns"]), str(record.get("budget_mode", "hidden")))
    injection = record.get("error_injection")
    if injection:
        env = ErrorInjection(env, after_expert_steps=int(injection["after_expert_steps"]))
    return env


def replay_trajectories(
    make_env: EnvFactory, records: Iterable[Mapping[str, Any]], check_rewards: bool = True
) -> list[TrajectoryText]:
    """Rebuild the conversation of every record by replaying it on a fresh env.

    The replay is the runner's: the same wrappers (budget, mode, error injection), then
    ``reset(seed=record seed, options={"task_id": ...})`` and the recorded actions. With
    ``check_rewards`` a reward that differs from the record's (another env, options or seed)
    raises ``ValueError`` instead of scoring actions in a context the policy never saw.
    """
    out: list[TrajectoryText] = []
    raw = make_env()
    try:
        base = text_env_of(raw)
        stacks: dict[tuple[Any, ...], gym.Env[str, str]] = {}
        for number, record in enumerate(records):
            actions = record.get("actions")
            if record.get("task_id") is None or actions is None:
                raise ValueError(f"record {number} lacks 'task_id' or 'actions'")
            task_id = str(record["task_id"])
            injection = record.get("error_injection") or None
            key = (
                record.get("max_turns"),
                record.get("budget_mode", "hidden"),
                None if injection is None else int(injection["after_expert_steps"]),
            )
            if key not in stacks:
                stacks[key] = _budget_stack(raw, record)
            env = stacks[key]
            env.reset(seed=record.get("seed"), options={"task_id": task_id})
            rewards = record.get("rewards")
            systems: list[str] = []
            for t, action in enumerate(actions):
                systems.append(base.system_prompt() or DEFAULT_SYSTEM_PROMPT)
                _, reward, terminated, truncated, _ = env.step(str(action))
                if check_rewards and rewards is not None and float(reward) != float(rewards[t]):
                    raise ValueError(
                        f"record {number} ({task_id}): replay diverged at turn {t + 1} (reward "
                        f"{reward} vs recorded {rewards[t]}); was it made with another env, "
                        "options or seed?"
                    )
                if (terminated or truncated) and t < len(actions) - 1:
                    raise ValueError(
                        f"record {number} ({task_id}): the replay ended at turn {t + 1} but the "
                        f"record has {len(actions)} actions"
                    )
            messages = base.messages()
            index = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
            index = index[len(index) - len(actions) :] if actions else []
            if [messages[i]["content"] for i in index] != [str(a) for a in actions]:
                raise ValueError(
                    f"record {number} ({task_id}): the env's messages do not hold the recorded "
                    "actions as its last assistant turns"
                )
            cut = index[-1] + 1 if index else 0
            out.append(
                TrajectoryText(
                    task_id=task_id,
                    sample=int(record.get("sample", number)),
                    success=bool(record.get("success")),
                    messages=messages[:cut],
                    systems=systems,
                    action_index=index,
                )
            )
    finally:
        raw.close()
    return out


# ---------------------------------------------------------------------------------- scoring
@dataclass
class ScoringModel:
    """A model that scores actions: its chat template (prompter) and a teacher-forcing scorer.

    Attributes:
        name: what tables call it.
        engine: ``"transformers"``, ``"vllm"`` or ``"openai-completions"``.
        dtype: the weights' dtype as the engine runs them (``"float32"``, ``"bfloat16"``, ...).
        prompter: renders conversations with the model's chat template.
        scorer: :class:`~multiturn_envs.policies.scoring.Scorer` of the same model.
    """

    name: str
    engine: str
    dtype: str
    prompter: ChatPrompter
    scorer: Scorer

    @property
    def identity(self) -> tuple[str, str]:
        return (self.engine, self.dtype)

    def sequences(self, trajectory: TrajectoryText) -> list[tuple[ScoringSequence, list[int]]]:
        """Token sequences covering every action of ``trajectory``, and the actions they hold.

        One sequence for the whole trajectory when the system prompt stays the same and the
        template renders history as a prefix; otherwise one sequence per action (its own
        context), which is exact but costs O(T^2) tokens.
        """
        prompter = self.prompter
        override = prompter.system_prompt
        n = trajectory.n_actions
        if n == 0:
            return []

        def conversation(upto: int, system: str) -> list[dict[str, str]]:
            msgs = trajectory.messages[: trajectory.action_index[upto] + 1]
            chosen = system if override is None else override
            return build_conversation(msgs, chosen, prompter.fold_system)

        if len(set(trajectory.systems)) == 1:
            try:
                seq = prompter.sequence_of(conversation(n - 1, trajectory.systems[0]))
            except ValueError:
                pass
            else:
                if len(seq.spans) != n:
                    # the env's history had assistant turns before the recorded actions
                    seq = ScoringSequence(seq.token_ids, seq.spans[len(seq.spans) - n :])
                return [(seq, list(range(n)))]
        out = []
        for k in range(n):
            seq = prompter.sequence_of(conversation(k, trajectory.systems[k]))
            out.append((ScoringSequence(seq.token_ids, seq.spans[-1:]), [k]))
        return out

    def score(self, trajectories: Sequence[TrajectoryText]) -> list[list[list[float]]]:
        """Per trajectory, per action, the log-prob of each token (EOS included), one call."""
        plans = [self.sequences(t) for t in trajectories]
        flat = [seq for plan in plans for seq, _ in plan]
        scored = self.scorer.score(flat) if flat else []
        out: list[list[list[float]]] = []
        position = 0
        for traj, plan in zip(trajectories, plans):
            per_action: list[list[float]] = [[] for _ in range(traj.n_actions)]
            for _, actions in plan:
                for k, span in zip(actions, scored[position]):
                    per_action[k] = [float(x) for x in span]
                position += 1
            out.append(per_action)
        return out


def ensure_comparable(a: ScoringModel, b: ScoringModel) -> None:
    """Refuse to subtract log-probs of two engines or dtypes (bf16 vLLM vs HF: ~0.3 nats/token)."""
    if a.identity != b.identity:
        raise ValueError(
            f"an LLR subtracts log-probs: score both models on ONE engine and dtype, got "
            f"{a.name} on {a.engine}/{a.dtype} and {b.name} on {b.engine}/{b.dtype}"
        )


def scoring_model_from_spec(spec_text: str, system_prompt: str | None = None) -> ScoringModel:
    """A scoring model from a policy spec (``hf:``, ``vllm:``, ``openai:``, see policies/spec.py).

    ``openai:`` scores through ``/v1/completions`` with echo and needs ``tokenizer=<folder>``
    (the served model's tokenizer, to build token-id prompts locally) and ideally ``dtype=``
    (what the server runs; recorded, not checked).
    """
    from multiturn_envs.policies.spec import hf_location, parse_llm_spec

    spec = parse_llm_spec(spec_text)
    name = spec.get("name") or spec_text
    if spec.engine == "hf":
        from multiturn_envs.policies.scoring import TransformersScorer
        from multiturn_envs.policies.transformers_backend import load_model_and_tokenizer

        folder, gguf = hf_location(spec)
        dtype = spec.get("dtype") or "float32"
        model, tokenizer = load_model_and_tokenizer(
            folder, gguf_file=gguf, dtype=dtype, device=spec.get("device") or "cpu"
        )
        return ScoringModel(
            name,
            "transformers",
            dtype,
            ChatPrompter(tokenizer, system_prompt=system_prompt),
            TransformersScorer(model),
        )
    if spec.engine == "vllm":
        from multiturn_envs.policies.scoring import VLLMScorer

        dtype = spec.get("dtype") or "auto"
        engine_args: dict[str, Any] = {"dtype": dtype}
        if spec.get("max_model_len"):
            engine_args["max_model_len"] = int(str(spec.get("max_model_len")))
        if spec.get("gpu_memory_utilization"):
            engine_args["gpu_memory_utilization"] = float(str(spec.get("gpu_memory_utilization")))
        vscorer = VLLMScorer.from_model(spec.model, **engine_args)
        tokenizer = vscorer.llm.get_tokenizer()
        resolved = str(getattr(vscorer.llm.llm_engine.model_config, "dtype", dtype))
        return ScoringModel(
            name,
            "vllm",
            resolved.replace("torch.", ""),
            ChatPrompter(tokenizer, system_prompt=system_prompt),
            vscorer,
        )
    from transformers import AutoTokenizer

    from multiturn_envs.policies.scoring import CompletionsScorer

    if not spec.get("tokenizer"):
        raise ValueError(f"{spec_text!r}: scoring over HTTP needs tokenizer=<folder>")
    tokenizer = AutoTokenizer.from_pretrained(str(spec.get("tokenizer")))
    return ScoringModel(
        name,
        f"openai-completions@{spec.model}",
        spec.get("dtype") or "server",
        ChatPrompter(tokenizer, system_prompt=system_prompt),
        CompletionsScorer(spec.model, str(spec.get("model")), api_key=spec.get("api_key")),
    )


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
    factory = make_env or env_factory_of(run)
    texts = replay_trajectories(factory, run.records)
    scored = model.score(texts)
    return [ScoredTrajectory(t.task_id, t.sample, t.success, s) for t, s in zip(texts, scored)]


def score_generated(model: ScoringModel, run: RunFile) -> list[ScoredTrajectory]:
    """Score every trajectory of ``run`` on the exact token ids its policy generated.

    Where :func:`score_run` re-tokenises the action texts (so that two models score the same
    thing), this rebuilds each trajectory's sequences from the record's ``turn_tokens``
    (:func:`~multiturn_envs.policies.prompting.replies_from_tokens`), raw completions and
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
    import multiturn_envs  # noqa: F401  (registers MT/* ids)

    config = run.config

    def make() -> gym.Env[str, str]:
        return gym.make(
            config["env_id"], disable_env_checker=True, **dict(config.get("env_kwargs") or {})
        )

    return make


def ratio_interval(
    numerators: np.ndarray,
    denominators: np.ndarray,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> Interval:
    """``sum(num) / sum(den)`` with a percentile interval from resampling units (tasks).

    A pooled mean (all tokens, actions or trajectories weigh the same) whose uncertainty comes
    from the tasks they belong to. Replicates whose resampled denominator is 0 are dropped.
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError("numerators and denominators are one value per unit each")
    total = float(den.sum())
    if num.size == 0 or total <= 0:
        return Interval(math.nan, math.nan, math.nan)
    estimate = float(num.sum()) / total
    if n_boot <= 0 or num.size < 2:
        return Interval(estimate, math.nan, math.nan)
    idx = bootstrap_indices(num.size, n_boot, seed)
    nums, dens = num[idx].sum(axis=1), den[idx].sum(axis=1)
    keep = dens > 0
    reps = nums[keep] / dens[keep]
    low, high = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return Interval(estimate, float(low), float(high))


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


def _run_label(run: RunFile) -> str:
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


# ---------------------------------------------------------------------------------- CLI
def _write_json(out: str | None, payload: dict[str, Any]) -> str:
    if out is None:
        return ""
    import json
    from pathlib import Path

    Path(out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return f"\nwritten: {out}"


def run_nll_cli(
    files: Sequence[str],
    model_spec: str,
    *,
    system_prompt: str | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int = 0,
    out: str | None = None,
) -> str:
    """What ``multiturn-envs nll`` runs: every file's actions under one scoring model."""
    runs = [read_run(f) for f in files]
    model = scoring_model_from_spec(model_spec, system_prompt)
    summaries = [
        action_nll(score_run(model, run), _run_label(run), model.name, n_boot, alpha, seed)
        for run in runs
    ]
    payload = {
        "model": {"name": model.name, "engine": model.engine, "dtype": model.dtype},
        "runs": [{g: s.to_dict() for g, s in per.items()} for per in summaries],
    }
    return format_nll(summaries, model, alpha, n_boot) + _write_json(out, payload)


def run_llr_cli(
    files: Sequence[str],
    model_a_spec: str,
    model_b_spec: str,
    *,
    system_prompt: str | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    alpha: float = 0.05,
    seed: int = 0,
    out: str | None = None,
) -> str:
    """What ``multiturn-envs llr`` runs: every file's trajectories scored under A and under B."""
    runs = [read_run(f) for f in files]
    a = scoring_model_from_spec(model_a_spec, system_prompt)
    b = a if model_b_spec == model_a_spec else scoring_model_from_spec(model_b_spec, system_prompt)
    ensure_comparable(a, b)
    summaries = []
    for run in runs:
        texts = replay_trajectories(env_factory_of(run), run.records)
        sa = [
            ScoredTrajectory(t.task_id, t.sample, t.success, s)
            for t, s in zip(texts, a.score(texts))
        ]
        sb = (
            sa
            if b is a
            else [
                ScoredTrajectory(t.task_id, t.sample, t.success, s)
                for t, s in zip(texts, b.score(texts))
            ]
        )
        summaries.append(
            trajectory_llr(pair_llr(sa, sb), _run_label(run), a.name, b.name, n_boot, alpha, seed)
        )
    payload = {
        "model_a": {"name": a.name, "engine": a.engine, "dtype": a.dtype},
        "model_b": {"name": b.name, "engine": b.engine, "dtype": b.dtype},
        "runs": [{g: s.to_dict() for g, s in per.items()} for per in summaries],
    }
    return format_llr(summaries, a, b, alpha, n_boot) + _write_json(out, payload)
