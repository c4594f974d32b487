"""A record file as an inspect_ai eval log: ``inspect view`` shows our runs, turn by turn.

inspect_ai's log format is documented and versioned (its own pydantic models,
``read_eval_log``/``write_eval_log``) and it has a viewer; writing our runs in that format gives
users that viewer, and our per-turn oracle scores show in it (no inspect eval has them). The
models are inspect_ai's own (the optional extra ``[inspect]``); nothing here writes its JSON by
hand. The mapping:

* **the eval** (``EvalSpec``): the run's header. ``task`` is the env id, ``model`` the policy,
  ``task_args`` the env's ``gym.make`` arguments, ``config`` the budget (``turn_limit``) and the
  token limit, ``epochs`` K; the whole header is ``metadata["multiturn_envs"]["header"]``.
* **one sample per trajectory**: ``id`` the task id (with ``@T=<budget>`` in announced mode,
  where each budget has its own episodes), ``epoch`` the sample index + 1 (K samples are K
  epochs). ``messages`` is the conversation rebuilt by replaying the record (:mod:`.replay`,
  checked against the record's rewards): the env's system prompt and observations, the
  policy's actions, tool calls as inspect tool calls and the env's answer to one as a tool
  message. ``scores``: ``success`` (1 or 0; its explanation names the first-success turn, the
  budget and how the episode ended) and ``step_score`` (the mean oracle score, every turn's in
  its metadata). ``metadata`` holds the record's per-turn lists (step scores, rewards, parse
  errors, tokens), the budget and its mode, the first-success turn, the seed and how the
  episode ended. ``model_usage`` holds the episode's tokens where the policy reported them.
* **the transcript** (``events``): per turn, a model event (the action, its tokens) and an
  intermediate score event with the oracle's ``step_score``; then the final score.
* **the results**: ``success`` (its mean), and the Pass@(K,T) surface, one metric per cell
  (``pass@(K,T)``) with its bootstrap interval over tasks in the metric's metadata, as
  ``multiturn-envs report`` computes it (:func:`~.report.summarise`); the whole surface is also
  ``results.metadata["pass_surface"]``.

Files: the export reads the record file through :func:`~.records.read_run` (bounded), and
writes under the output rule (:mod:`multiturn_envs.output_files`): a new file, or one it
replaces only when it is an inspect log this export wrote (its ``metadata["multiturn_envs"]``
marker) and ``overwrite`` is given; anything else at the path is refused, byte for byte
untouched. ``.eval`` (inspect's zipped format, the default) or
``.json``, by the file's suffix.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import gymnasium as gym

from multiturn_envs.episode import ENDS, env_end
from multiturn_envs.errors import ReplayError
from multiturn_envs.harness.costs import episode_tokens
from multiturn_envs.harness.records import RunFile, TrajectoryRecord, in_task_order, read_run
from multiturn_envs.harness.replay import EnvFactory, Replay
from multiturn_envs.output_files import check_output, write_output
from multiturn_envs.tools import ToolCallError, is_tool_call_text, read_tool_calls
from multiturn_envs.version import __version__

__all__ = ["EXPORT_MARKER", "export_inspect", "inspect_eval_log"]

EXPORT_MARKER = "multiturn_envs"
"""The key of ``EvalLog.eval.metadata`` an exported log carries (what ``overwrite`` checks)."""
MAX_EXISTING_LOG_BYTES = 1 << 30
"""An existing file at the output path larger than this is not read to check it (refused)."""
_MAX_CALLS_READ = 64
"""The most tool calls read from one action for the transcript (the rest stay in its text)."""


def _inspect() -> Any:
    try:
        import inspect_ai.log as log
    except ImportError:
        raise ImportError(
            "exporting to inspect_ai's log format needs inspect_ai: pip install "
            "'multiturn-envs[inspect]'"
        ) from None
    return log


def _log_models() -> Any:
    """inspect_ai's log module itself (some models, ``EvalScorer``, are not re-exported)."""
    from inspect_ai.log import _log

    return _log


def _sample_id(record: Mapping[str, Any], announced: bool) -> str:
    task = str(record["task_id"])
    return f"{task}@T={record['max_turns']}" if announced else task


def _end_of(record: Mapping[str, Any]) -> str:
    """How the episode ended, a name of the episode kit's :data:`~multiturn_envs.episode.ENDS`
    (``-`` for a record that says it did not end: a hand-made one)."""
    if record.get("success"):
        return ENDS["success"].name
    if record.get("agent_stopped"):
        return ENDS["agent_stopped"].name
    reason = record.get("truncation_reason")
    end = env_end(
        bool(record.get("terminated")),
        bool(record.get("truncated")),
        {"truncation_reason": reason} if isinstance(reason, str) else {},
    )
    return "-" if end is None else end.name


def _timings(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record's timings (a hand-made record may lack them)."""
    value = record.get("timings")
    return value if isinstance(value, Mapping) else {}


def _turn_count(values: Any, turn: int) -> int | None:
    if isinstance(values, list) and turn < len(values) and isinstance(values[turn], int):
        return int(values[turn])
    return None


def _usage(model: Any, prompt: int | None, completion: int | None) -> Any:
    if prompt is None or completion is None:
        return None
    return model.ModelUsage(
        input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion
    )


def _conversation(
    record: TrajectoryRecord, replay: Replay | None, number: int
) -> tuple[list[dict[str, Any]], list[Any]]:
    """The episode's messages (role, content) and its env's tools, replayed when possible."""
    if replay is None:
        messages: list[dict[str, Any]] = []
        for action in record["actions"]:
            messages.append({"role": "assistant", "content": str(action)})
            messages.append({"role": "user", "content": "(observation not replayed)"})
        return messages, []
    episode = replay.start(record, number)
    system = episode.base.system_prompt()
    tools = list(episode.base.tools())
    for _ in episode.turns():
        pass
    history = [dict(m) for m in episode.base.messages()]
    if system:
        history.insert(0, {"role": "system", "content": system})
    return history, tools


def _chat_messages(
    history: Sequence[Mapping[str, Any]], tools: Sequence[Any], policy: str, model: Any
) -> list[Any]:
    """inspect's chat messages of a conversation: an action that is a tool call becomes an
    assistant message with inspect tool calls, and the env's answer to it a tool message."""
    from inspect_ai.tool import ToolCall as InspectToolCall

    out: list[Any] = []
    pending: list[Any] = []  # the calls the next env message answers
    for index, message in enumerate(history):
        role, content = message.get("role"), str(message.get("content", ""))
        if role == "system":
            out.append(model.ChatMessageSystem(content=content))
        elif role == "assistant":
            calls: list[Any] = []
            if tools and is_tool_call_text(content):
                with contextlib.suppress(ToolCallError):
                    read = read_tool_calls(content, tools, max_calls=_MAX_CALLS_READ, strict=False)
                    calls = [
                        InspectToolCall(
                            id=f"call_{index}_{i}", function=c.name, arguments=dict(c.arguments)
                        )
                        for i, c in enumerate(read)
                    ]
            out.append(
                model.ChatMessageAssistant(
                    content=content, tool_calls=calls or None, model=policy, source="generate"
                )
            )
            pending = calls
        elif pending:
            out.append(
                model.ChatMessageTool(
                    content=content, tool_call_id=pending[0].id, function=pending[0].function
                )
            )
            pending = []
        else:
            out.append(model.ChatMessageUser(content=content))
    return out


def _events(
    record: TrajectoryRecord,
    messages: Sequence[Any],
    policy: str,
    start: datetime,
    log: Any,
    model: Any,
    scorer: Any,
) -> list[Any]:
    """Per turn a model event (the action and its tokens) and an intermediate score event
    with the oracle's step score; the timestamps follow the record's timings."""
    from inspect_ai.event import ModelEvent, ScoreEvent

    # each action with the messages new since the previous one (what the turn added to the
    # conversation the policy read; the sample's messages hold the whole of it)
    turns: list[tuple[Any, list[Any]]] = []
    fresh: list[Any] = []
    for message in messages:
        if getattr(message, "role", None) == "assistant":
            turns.append((message, fresh))
            fresh = []
        else:
            fresh.append(message)
    turns = turns[len(turns) - len(record["actions"]) :]
    timings = _timings(record)
    policy_s = list(timings.get("policy_batch_s") or [])
    env_s = list(timings.get("env_step_s") or [])
    clock = float(timings.get("reset_s") or 0.0)
    scores = record.get("step_scores") or []
    rewards = record.get("rewards") or []
    events: list[Any] = []
    for turn, (message, new) in enumerate(turns):
        spent = float(policy_s[turn]) if turn < len(policy_s) else 0.0
        usage = _usage(
            model,
            _turn_count(record.get("prompt_tokens"), turn),
            _turn_count(record.get("completion_tokens"), turn),
        )
        events.append(
            ModelEvent(
                model=policy,
                input=new,
                tools=[],
                tool_choice="auto",
                config=model.GenerateConfig(),
                output=model.ModelOutput(
                    model=policy,
                    choices=[model.ChatCompletionChoice(message=message, stop_reason="stop")],
                    usage=usage,
                ),
                timestamp=start + timedelta(seconds=clock),
                working_start=clock,
                working_time=spent,
                metadata={"turn": turn + 1},
            )
        )
        clock += spent + (float(env_s[turn]) if turn < len(env_s) else 0.0)
        score = scores[turn] if turn < len(scores) else None
        reward = rewards[turn] if turn < len(rewards) else None
        events.append(
            ScoreEvent(
                score=scorer.Score(
                    value=float("nan") if score is None else float(score),
                    explanation=f"turn {turn + 1}: oracle step score "
                    f"{'-' if score is None else f'{float(score):.4g}'}, reward {reward}",
                    metadata={"turn": turn + 1, "step_score": score, "reward": reward},
                ),
                intermediate=True,
                scorer="step_score",
                timestamp=start + timedelta(seconds=clock),
                working_start=clock,
            )
        )
    return events


def _sample(
    record: TrajectoryRecord,
    history: list[dict[str, Any]],
    tools: Sequence[Any],
    announced: bool,
    start: datetime,
    log: Any,
    model: Any,
    scorer: Any,
) -> Any:
    from inspect_ai.event import ScoreEvent

    policy = str(record.get("policy", ""))
    messages = _chat_messages(history, tools, policy, model)
    first_user = next((m for m in history if m.get("role") == "user"), None)
    turns = int(record.get("turns", len(record["actions"])))
    first = record.get("first_success_turn")
    mode = str(record.get("budget_mode", "hidden"))
    end = _end_of(record)
    tokens = episode_tokens(record)  # the turns' and the stopping reply's, as `report` sums
    usage = None if tokens is None else _usage(model, *tokens)
    step_scores = [s for s in (record.get("step_scores") or []) if s is not None]
    success = scorer.Score(
        value=1.0 if record.get("success") else 0.0,
        answer=str(record["actions"][-1]) if record["actions"] else None,
        explanation=(
            f"solved at turn {first} of a {mode} budget of {record['max_turns']}"
            if first is not None
            else f"not solved in {turns} turns of a {mode} budget of {record['max_turns']}"
        )
        + f"; ended by {end}",
        metadata={"first_success_turn": first, "end": end},
    )
    mean_step = scorer.Score(
        value=float(sum(step_scores) / len(step_scores)) if step_scores else float("nan"),
        explanation="mean oracle step score over the turns: "
        + ", ".join(f"{float(s):.3g}" for s in step_scores[:50])
        + (" ..." if len(step_scores) > 50 else ""),
        metadata={"step_scores": list(record.get("step_scores") or [])},
    )
    timings = _timings(record)
    wall = float(timings.get("wall_s") or 0.0)
    events = _events(record, messages, policy, start, log, model, scorer)
    events.append(
        ScoreEvent(
            score=success,
            scorer="success",
            timestamp=start + timedelta(seconds=wall),
            working_start=wall,
        )
    )
    metadata = {
        key: record.get(key)
        for key in (
            "task_id",
            "sample",
            "seed",
            "budget_mode",
            "max_turns",
            "turns",
            "success",
            "first_success_turn",
            "terminated",
            "truncated",
            "truncation_reason",
            "agent_stopped",
            "return",
            "rewards",
            "step_scores",
            "parse_errors",
            "prompt_tokens",
            "completion_tokens",
            "stop_tokens",
            "error_injection",
            "env_spec",
        )
    }
    metadata["end"] = end
    return log.EvalSample(
        id=_sample_id(record, announced),
        epoch=int(record["sample"]) + 1,
        input=str(first_user["content"]) if first_user else "",
        target="",
        messages=messages,
        output=model.ModelOutput(
            model=policy,
            choices=[model.ChatCompletionChoice(message=messages_last_assistant(messages, model))],
            usage=usage,
        ),
        scores={"success": success, "step_score": mean_step},
        metadata=metadata,
        events=events,
        model_usage={policy: usage} if usage is not None else {},
        started_at=start,
        completed_at=start + timedelta(seconds=wall),
        total_time=wall,
        working_time=wall,
        turn_count=turns,
        token_limit=None,
    )


def messages_last_assistant(messages: Sequence[Any], model: Any) -> Any:
    """The last assistant message (an empty one for an episode without turns)."""
    for message in reversed(messages):
        if getattr(message, "role", None) == "assistant":
            return message
    return model.ChatMessageAssistant(content="")


def _results(
    run: RunFile, n_boot: int, alpha: float, seed: int, log: Any, scorer_total: int
) -> Any:
    from multiturn_envs.harness.report import summarise

    records = run.records
    success = sum(1 for r in records if r.get("success")) / len(records)
    scores = [
        log.EvalScore(
            name="success",
            scorer="success",
            scored_samples=len(records),
            metrics={"mean": log.EvalMetric(name="mean", value=success)},
        )
    ]
    metadata: dict[str, Any] = {}
    try:
        table = summarise(run, None, None, n_boot, alpha, seed)
    except ValueError as exc:  # e.g. announced budgets with a budget not yet run: say why
        metadata["pass_surface_error"] = str(exc)
    else:
        s, ci = table.surface, table.ci
        metrics: dict[str, Any] = {}
        for i, k in enumerate(s.ks.tolist()):
            for j, t in enumerate(s.ts.tolist()):
                value = float(s.values[i, j])
                if math.isnan(value):
                    continue
                interval = (
                    None
                    if ci is None
                    else {"low": float(ci.low[i, j]), "high": float(ci.high[i, j])}
                )
                name = f"pass@({k},{t})"
                metrics[name] = log.EvalMetric(
                    name=name, value=value, params={"k": k, "t": t}, metadata=interval
                )
        scores.append(
            log.EvalScore(
                name="pass_at_k_t",
                scorer="success",
                reducer="pass@(K,T)",
                scored_samples=len(records),
                metrics=metrics,
                metadata={"n_tasks": s.n_tasks, "alpha": alpha, "n_boot": n_boot},
            )
        )
        metadata["pass_surface"] = {
            "ks": s.ks.tolist(),
            "ts": s.ts.tolist(),
            "values": s.values.tolist(),
            "low": None if ci is None else ci.low.tolist(),
            "high": None if ci is None else ci.high.tolist(),
            "alpha": alpha,
            "n_boot": n_boot,
            "bootstrap_seed": seed,
            "n_tasks": s.n_tasks,
            "task_ids": list(s.task_ids),
        }
    return log.EvalResults(
        total_samples=scorer_total,
        completed_samples=len(records),
        scores=scores,
        metadata=metadata,
    )


def _created(header: Mapping[str, Any]) -> datetime:
    try:
        stamp = datetime.fromisoformat(str(header.get("created")))
    except ValueError:
        return datetime.fromtimestamp(0, timezone.utc)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def inspect_eval_log(
    run: RunFile,
    *,
    make_env: EnvFactory | None = None,
    replay: bool = True,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Any:
    """The inspect_ai ``EvalLog`` of a record file read with :func:`~.records.read_run` (the
    module docstring gives the mapping). ``replay=False`` skips rebuilding the observations
    (for an env that cannot run here): the messages then hold the actions only."""
    log = _inspect()
    import inspect_ai
    import inspect_ai.model as model
    import inspect_ai.scorer as scorer

    from multiturn_envs.harness.likelihood import env_factory_of

    header = run.header
    config = run.config
    if not run.records:
        raise ValueError(f"{run.path} holds no trajectories yet")
    announced = config.get("budget_mode") == "announced"
    records = in_task_order(run.records, config["tasks"])
    created = _created(header)
    samples = []
    env = (make_env or env_factory_of(run)) if replay else None
    with contextlib.ExitStack() as stack:
        replayer = None
        if env is not None:
            try:
                replayer = stack.enter_context(Replay(env))
            except (gym.error.Error, ImportError, TypeError, ValueError) as exc:
                raise ReplayError(
                    f"{run.path}: its env {config['env_id']!r} cannot be made here to replay "
                    f"the episodes ({exc})"
                ) from None
        clock = created
        for number, record in enumerate(records):
            history, tools = _conversation(record, replayer, number)
            samples.append(_sample(record, history, tools, announced, clock, log, model, scorer))
            clock += timedelta(seconds=float(_timings(record).get("wall_s") or 0))
    budgets = (config.get("turn_grid") or []) if announced else [config["max_turns"]]
    total = len(config["tasks"]) * int(config["samples"]) * max(len(budgets), 1)
    usage: dict[str, Any] = {}
    for sample in samples:
        for name, used in sample.model_usage.items():
            usage[name] = used if name not in usage else usage[name] + used
    marker = {
        "header": dict(header),
        "record_file": os.path.abspath(run.path),
        "duplicates_ignored": run.duplicates,
        "exported_by": f"multiturn-envs {__version__}",
    }
    spec = log.EvalSpec(
        eval_id=f"{header['run_id']}-eval",
        run_id=str(header["run_id"]),
        created=created.isoformat(),
        task=str(config["env_id"]),
        task_id=str(header["run_id"]),
        task_version=int(header.get("schema", 0)),
        task_args=dict(config.get("env_kwargs") or {}),
        solver=str(config["policy"]),
        dataset=log.EvalDataset(
            name=str(config["env_id"]),
            samples=len(config["tasks"]),
            sample_ids=[str(t) for t in config["tasks"]],
        ),
        model=str(config["policy"]),
        config=log.EvalConfig(
            epochs=int(config["samples"]),
            turn_limit=int(config["max_turns"]),
            token_limit=config.get("token_limit"),
        ),
        packages={"multiturn-envs": __version__, "inspect_ai": inspect_ai.__version__},
        metadata={
            EXPORT_MARKER: marker,
            "budget_mode": config.get("budget_mode"),
            "turn_grid": config.get("turn_grid"),
            "error_after": config.get("error_after"),
            "seed": config.get("seed"),
        },
        scorers=[
            _log_models().EvalScorer(name="success"),
            _log_models().EvalScorer(name="step_score"),
        ],
    )
    complete = len(records) >= total
    end = clock
    return log.EvalLog(
        version=2,
        status="success" if complete else "cancelled",
        eval=spec,
        plan=log.EvalPlan(
            name="multiturn-envs",
            steps=[
                log.EvalPlanStep(
                    solver=str(config["policy"]),
                    params={"max_turns": config["max_turns"], "budget_mode": config["budget_mode"]},
                )
            ],
        ),
        results=_results(run, n_boot, alpha, seed, log, total),
        stats=log.EvalStats(
            started_at=created.isoformat(), completed_at=end.isoformat(), model_usage=usage
        ),
        samples=samples,
    )


def _ours(path: Path, log: Any) -> bool:
    """Whether ``path`` is an inspect log this export wrote (read within a size bound)."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        if path.stat().st_size > MAX_EXISTING_LOG_BYTES:
            return False
        existing = log.read_eval_log(str(path), header_only=True)
    except Exception:  # any reason it cannot be read as a log: it is not ours
        return False
    metadata = existing.eval.metadata or {}
    return isinstance(metadata.get(EXPORT_MARKER), dict)


def export_inspect(
    run_path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    make_env: EnvFactory | None = None,
    replay: bool = True,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write the record file ``run_path`` as an inspect_ai eval log; return its path.

    ``out`` defaults to the record file with the suffix ``.eval``; a ``.json`` suffix writes
    inspect's JSON format. An existing ``out`` is replaced only with ``overwrite`` and only
    when it is a log this export wrote; anything else is an
    :class:`~multiturn_envs.errors.OutputFileError` and stays as it was. The file appears whole
    (written beside it, then moved in place).
    """
    log = _inspect()
    target = Path(out) if out is not None else Path(run_path).with_suffix(".eval")
    if target.suffix not in (".eval", ".json"):
        raise ValueError(f"{target}: an inspect log is a .eval or a .json file")
    check_output(target, overwrite=overwrite, is_ours=lambda p: _ours(p, log))
    run = read_run(run_path)
    eval_log = inspect_eval_log(
        run, make_env=make_env, replay=replay, n_boot=n_boot, alpha=alpha, seed=seed
    )
    write_output(
        target,
        lambda tmp: log.write_eval_log(eval_log, tmp, format=target.suffix[1:]),
        overwrite=overwrite,
        is_ours=lambda p: _ours(p, log),
    )
    if progress is not None:
        progress(f"{target}: {len(eval_log.samples or [])} samples")
    return target
