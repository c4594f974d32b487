"""Replaying InterCode's published agent runs through ``MT/InterCode-SQL-v0``.

InterCode published 10-turn runs of five models on the 1,034 Spider dev tasks
(``ic_sql_multiturn_<model>_10_turns.json``): every action, the rows MySQL 8 returned, and
InterCode's reward. Replaying every action through the env (``scoring="intercode"``,
``end_on_success=False``, MySQL's strictness on) and comparing rewards measures how faithfully
the env reproduces InterCode on MySQL; :func:`replay_published_runs` is the one function the
agreement test and ``benchmarks/bench_intercode_agreement.py`` both call.

What is compared, per model:

* per action that reached the database (InterCode's parser refused some replies, and a few
  episodes were "blocked"; those never ran): our reward against InterCode's;
* per trajectory: success (some action scored 1) against InterCode's;
* the ``exact`` mode, as a regression check: our exact verdict on our rows against the exact
  verdict on the rows MySQL recorded (both against our gold result);
* the observation text: whether ours reads exactly as what MySQL showed the agent.

Two facts of the published data shape the comparison (both measured, see the env card):

* the runs were scored by two versions of InterCode's reward. Some episodes carry unrounded
  rewards or full marks for rows in another order: they were scored by IoU alone, an earlier
  version without the Kendall-tau factor. Each episode is scored with the version that explains
  more of its recorded rewards (the current one on a tie); the count is reported.
* some differences are right on purpose and are classified, not hidden: a gold query MySQL 8
  rejects (InterCode then scores against ``[]``; we keep the gold working) and tables that
  existed only in InterCode's long-lived server (``concert_singer.singers`` ...).
"""

from __future__ import annotations

import ast
import datetime as dt
import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

from multiturn_envs.envs.intercode_sql.database import Row
from multiturn_envs.envs.intercode_sql.mysql_rejects import mysql_rejects
from multiturn_envs.envs.intercode_sql.scoring import exact_match, intercode_reward
from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.untrusted import load_json

PUBLISHED_MODELS: tuple[str, ...] = (
    "gpt-3.5",
    "chat-bison-001",
    "text-davinci-003",
    "vicuna",
    "starchat",
)
TASK_FILE = "ic_spider_dev.json"
MAX_RUN_FILE_BYTES = 256 << 20
"""A published run file (each is about 1-3 MB)."""
REPLAY_ENV_OPTIONS: Mapping[str, Any] = MappingProxyType(
    {
        "scoring": "intercode",
        "end_on_success": False,
        "max_turns": None,
        "mysql_strict": True,
        "max_rows_shown": 10**9,  # InterCode shows every row: compare whole observations
        "max_cell_chars": 10**9,
        "max_observation_chars": 10**9,  # up to 86,494 characters there
    }
)
# The MySQL connector of the gpt-3.5 run returned DESC's types as str, the later runs' as bytes.
DESCRIBE_TYPES: Mapping[str, str] = MappingProxyType({"gpt-3.5": "str"})
_NOT_RUN_PREFIXES = ("No SQL code was found", "Format your SQL command")


def run_file(data_dir: str | Path, model: str) -> Path:
    """The published run file of ``model`` under ``data_dir``."""
    return Path(data_dir) / f"ic_sql_multiturn_{model}_10_turns.json"


# ---------------------------------------------------------------------- MySQL's rows
_CALLS = {
    "Decimal": Decimal,
    "datetime.datetime": dt.datetime,
    "datetime.date": dt.date,
    "datetime.timedelta": dt.timedelta,
    "datetime.time": dt.time,
}


def _call_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_call_name(node.value)}.{node.attr}"
    raise ValueError("not a name")


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call) and not node.keywords:
        fn = _CALLS[_call_name(node.func)]
        return fn(*(_literal(a) for a in node.args))
    raise ValueError(f"unsupported expression {ast.dump(node)[:60]}")


def parse_mysql_rows(observation: str) -> list[Row] | None:
    """The rows of a recorded observation (``repr`` of a list of tuples, with ``Decimal`` and
    ``datetime`` calls), parsed without ``eval``; ``None`` when it is not such a list."""
    if not observation.startswith("["):
        return None
    try:
        value = _literal(ast.parse(observation, mode="eval").body)
    except (SyntaxError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if not isinstance(value, list) or not all(isinstance(r, tuple) for r in value):
        return None
    return value


# ---------------------------------------------------------------------- results
@dataclass(frozen=True)
class ActionReplay:
    """One replayed action: InterCode's reward and ours under both reward versions."""

    run: str
    task_index: int
    turn: int
    action: str
    recorded: float
    reward: float
    reward_iou_only: float
    cause: str  # "" when the rewards agree, else the classified cause of the difference


@dataclass
class ModelAgreement:
    """Agreement of one model's replay with InterCode's recorded rewards."""

    model: str
    episodes: int = 0
    actions: int = 0
    not_run: int = 0
    executed: int = 0
    same_reward: int = 0
    same_reward_current_version: int = 0
    iou_only_episodes: int = 0
    successes_intercode: int = 0
    successes_ours: int = 0
    same_success: int = 0
    same_observation: int = 0
    exact_checked: int = 0
    exact_agree: int = 0
    seconds: float = 0.0
    causes: Counter[str] = field(default_factory=Counter)
    differences: list[ActionReplay] = field(default_factory=list)

    @property
    def reward_agreement(self) -> float:
        return self.same_reward / self.executed if self.executed else 1.0

    @property
    def explained(self) -> int:
        """Differing actions whose cause is a known, deliberate difference."""
        return sum(n for cause, n in self.causes.items() if cause != "unexplained")

    @property
    def reward_agreement_explained(self) -> float:
        """Agreement counting the deliberate differences as explained."""
        if not self.executed:
            return 1.0
        return (self.same_reward + self.explained) / self.executed

    @property
    def success_agreement(self) -> float:
        return self.same_success / self.episodes if self.episodes else 1.0

    @property
    def observation_agreement(self) -> float:
        """Actions whose observation text is exactly what MySQL showed the agent."""
        return self.same_observation / self.executed if self.executed else 1.0

    @property
    def exact_agreement(self) -> float:
        return self.exact_agree / self.exact_checked if self.exact_checked else 1.0


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.0, abs_tol=1e-9)


def _classify(gold_rejected: str | None, missing_table: bool) -> str:
    """The cause of a reward difference: a deliberate one, or ``"unexplained"``."""
    if gold_rejected is not None:
        return "gold rejected by MySQL 8"
    if missing_table:
        return "table only on InterCode's server"
    return "unexplained"


def replay_model(
    data_dir: str | Path, model: str, env_options: Mapping[str, Any] | None = None
) -> ModelAgreement:
    """Replay one model's published run through a fresh env; see the module docstring.

    ``env_options`` override :data:`REPLAY_ENV_OPTIONS` (e.g. ``mysql_row_order=False``).
    """
    from multiturn_envs.envs.intercode_sql.env import InterCodeSQLEnv

    data_dir = Path(data_dir)
    runs = load_json(run_file(data_dir, model), max_bytes=MAX_RUN_FILE_BYTES)
    if not isinstance(runs, dict):
        raise UntrustedInputError(f"{run_file(data_dir, model)}: not a JSON object of runs")
    options = {
        **REPLAY_ENV_OPTIONS,
        "describe_types": DESCRIBE_TYPES.get(model, "bytes"),
        **(env_options or {}),
    }
    env = InterCodeSQLEnv(tasks=data_dir / TASK_FILE, **options)
    task_ids = list(env.task_ids())
    out = ModelAgreement(model)
    start = time.perf_counter()
    rejected: dict[int, str | None] = {}
    try:
        for run_key, record in runs.items():
            index = int(record["task_id"])
            task = env.task(task_ids[index])
            if index not in rejected:
                rejected[index] = mysql_rejects(task.gold, env.mysql_tables(task.db), task.db)
            env.reset(options={"task_id": task.task_id})
            gold_rows = env.gold_result().rows or []
            gold_width = len(env.gold_result().columns)
            order_matters = env.gold_orders(task.task_id)
            history = record["turn_history"]
            observations = history.get("observations", [])
            episode: list[tuple[ActionReplay, bool]] = []
            out.episodes += 1
            for turn, action in enumerate(history["actions"]):
                out.actions += 1
                recorded = float(history["rewards"][turn])
                obs = observations[turn] if turn < len(observations) else None
                if obs is None or obs.startswith(_NOT_RUN_PREFIXES):
                    out.not_run += 1
                    continue
                out.executed += 1
                observation, _, _, _, info = env.step(f"```sql\n{action}\n```")
                out.same_observation += observation == obs
                result = None if info.get("parse_error") else env.last_result
                rows = result.rows if result is not None else None
                iou = intercode_reward(rows, gold_rows, order_weighted=False)
                replay = ActionReplay(
                    run_key, index, turn, action, recorded, info["intercode_reward_raw"], iou, ""
                )
                our_error = result.error if result is not None else "unparsed"
                missing = bool(our_error) and "no such table" in str(our_error)
                missing = missing and obs.startswith("[")
                episode.append((replay, missing))
                mysql_rows = parse_mysql_rows(obs)
                if mysql_rows is not None and result is not None and rows is not None:
                    out.exact_checked += 1
                    width = len(result.columns)
                    verdict = exact_match(
                        rows, gold_rows, order_matters=order_matters,
                        pred_width=width, gold_width=gold_width,
                    )  # fmt: skip
                    mysql_verdict = exact_match(
                        mysql_rows, gold_rows, order_matters=order_matters,
                        pred_width=len(mysql_rows[0]) if mysql_rows else width,
                        gold_width=gold_width,
                    )  # fmt: skip
                    out.exact_agree += verdict == mysql_verdict
            current = sum(_same(r.recorded, r.reward) for r, _ in episode)
            older = sum(_same(r.recorded, r.reward_iou_only) for r, _ in episode)
            iou_only = older > current
            out.iou_only_episodes += iou_only
            out.same_reward_current_version += current
            ours_best = 0.0
            theirs_best = 0.0
            for replay, missing in episode:
                ours = replay.reward_iou_only if iou_only else replay.reward
                ours_best = max(ours_best, ours)
                theirs_best = max(theirs_best, replay.recorded)
                if _same(ours, replay.recorded):
                    out.same_reward += 1
                    continue
                cause = _classify(rejected[index], missing)
                out.causes[cause] += 1
                out.differences.append(replace(replay, cause=cause))
            theirs_ok = any(_same(float(r), 1.0) for r in history["rewards"])
            ours_ok = _same(ours_best, 1.0) or ours_best > 1.0
            out.successes_intercode += theirs_ok
            out.successes_ours += ours_ok
            out.same_success += theirs_ok == ours_ok
    finally:
        env.close()
    out.seconds = time.perf_counter() - start
    return out


def replay_published_runs(
    data_dir: str | Path,
    models: Sequence[str] = PUBLISHED_MODELS,
    processes: int | None = None,
    env_options: Mapping[str, Any] | None = None,
) -> list[ModelAgreement]:
    """Replay each model's run (one process per model, up to ``processes``; default: the
    CPUs available, at most one per model) and return the agreements in ``models``' order."""
    workers = processes or min(len(models), len(os.sched_getaffinity(0)))
    options = dict(env_options or {})
    if workers <= 1 or len(models) <= 1:
        return [replay_model(data_dir, m, options) for m in models]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(replay_model, str(data_dir), m, options) for m in models]
        return [f.result() for f in futures]


def agreement_table(agreements: Sequence[ModelAgreement]) -> str:
    """The per-model agreement as a Markdown table."""
    lines = [
        "| model | actions run | same reward | same reward, deliberate differences explained "
        "| same success | IoU-only episodes | exact mode agrees with MySQL's rows "
        "| same observation text |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in agreements:
        lines.append(
            f"| {a.model} | {a.executed:,} | {a.same_reward:,} ({a.reward_agreement:.2%}) "
            f"| {a.reward_agreement_explained:.2%} "
            f"| {a.same_success:,} / {a.episodes:,} ({a.success_agreement:.2%}) "
            f"| {a.iou_only_episodes} | {a.exact_agree:,} / {a.exact_checked:,} "
            f"({a.exact_agreement:.2%}) | {a.same_observation:,} ({a.observation_agreement:.2%}) |"
        )
    return "\n".join(lines)
