"""The env: :class:`InterCodeSQLEnv` (``MT/InterCode-SQL-v0``)."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv
from multiturn_envs.deprecation import renamed_kwargs
from multiturn_envs.envs.intercode_sql.actions import FORMAT_HINT, ParsedAction, parse_action
from multiturn_envs.envs.intercode_sql.database import (
    QueryLimits,
    QueryResult,
    SandboxedConnection,
    first_statement,
)
from multiturn_envs.envs.intercode_sql.dialect import (
    TEMPORARY_NOTE,
    emulate,
    is_sqlite_error_worth_transpiling,
    mysql_division,
    mysql_error,
    transpile_mysql,
    without_temporary,
)
from multiturn_envs.envs.intercode_sql.errors import gold_mutations
from multiturn_envs.envs.intercode_sql.functions import DEFAULT_CLOCK
from multiturn_envs.envs.intercode_sql.mysql_order import (
    is_query,
    needs_mysql_order,
    order_like_mysql,
    run_set_operation,
)
from multiturn_envs.envs.intercode_sql.mysql_rejects import might_be_rejected, mysql_rejects
from multiturn_envs.envs.intercode_sql.mysql_schema import MySQLTable
from multiturn_envs.envs.intercode_sql.parse_bounds import parse_bound_problem
from multiturn_envs.envs.intercode_sql.query_cache import QueryCache
from multiturn_envs.envs.intercode_sql.scoring import (
    SCORING_MODES,
    Scores,
    outer_query_orders,
    score_result,
)
from multiturn_envs.envs.intercode_sql.tasks import DatabaseCatalog, SQLTask, load_tasks
from multiturn_envs.extras import ENV_EXTRAS
from multiturn_envs.extras import require as require_extra
from multiturn_envs.tools import Tool, ToolCall

MAX_QUERY_CHARS = 20_000
"""Characters of one query (the SQL itself, after it is read from the reply)."""

SYSTEM_PROMPT = """\
You are an expert SQL programmer answering a question about a database by querying it.
Each turn, reply with one SQL query, raw or in a ```sql fenced block; you will see its result
(a list of row tuples) or its error. SHOW TABLES, DESC <table> and SHOW COLUMNS FROM <table>
work. When the last result answers the question, reply `submit` (or put `submit` on its own
line after your final query). Your changes to the database stay in your private copy."""


EXECUTE_TOOL = Tool(
    "execute_sql",
    "Run one SQL query on your private copy of the database and see its result (a list of row "
    "tuples) or its error. MySQL habits work: SHOW TABLES, DESC <table>, SHOW COLUMNS FROM "
    "<table>.",
    {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "one SQL statement"}},
        "required": ["query"],
    },
)
SUBMIT_TOOL = Tool(
    "submit",
    "Submit the result of your last query as your answer; this ends the episode. Call it "
    "after execute_sql in the same reply to run a query and submit its result at once.",
    {"type": "object", "properties": {}},
)
TOOLS: tuple[Tool, ...] = (EXECUTE_TOOL, SUBMIT_TOOL)
"""InterCode-SQL's actions as typed tools: run a query, submit."""


def parsed_of_calls(calls: Sequence[ToolCall]) -> ParsedAction:
    """The action of ``execute_sql`` and/or ``submit`` calls (in that order), or why not."""
    names = [c.name for c in calls]
    if names == ["execute_sql"]:
        return ParsedAction(str(calls[0].arguments["query"]), False)
    if names == ["submit"]:
        return ParsedAction(None, True)
    if names == ["execute_sql", "submit"]:
        return ParsedAction(str(calls[0].arguments["query"]), True)
    return ParsedAction(
        None,
        False,
        "Tool call error: call execute_sql, or submit, or execute_sql then submit (one query a "
        f"turn); got {', '.join(names)}.",
    )


@dataclass(frozen=True)
class _Gold:
    result: QueryResult
    order_matters: bool


class InterCodeSQLEnv(TextEnv):
    """Answer a question about a database by querying it (InterCode-SQL on embedded SQLite).

    ## Description
    Each episode poses one natural-language question about one SQLite database (Spider dev
    databases converted from InterCode's MySQL dump, or the bundled ones). The agent sends SQL
    queries and sees their results or errors, then submits. It works on a private in-memory copy
    of the database: whatever it runs (DELETE, DROP, UPDATE, ...) changes only that copy; the
    gold query runs on a pristine read-only copy, so nothing can change the gold answer, another
    episode or a file. MySQL habits work (SHOW TABLES, DESC, SHOW COLUMNS, USE <this db>), and
    a MySQL query SQLite rejects is transpiled with sqlglot (the observation says so).

    ## Spaces
    Observation and action: any ``str`` (:class:`~multiturn_envs.spaces.UnicodeText`). An
    action is SQL (raw or fenced) and/or ``submit``, or tool calls (:data:`TOOLS`:
    ``execute_sql(query)``, ``submit()``, or both in that order); anything else is a parse
    error that costs a turn.

    ## Rewards
    0 on every step but the last; on the step that ends the episode (``submit``, a correct
    result with ``end_on_success``, or the last turn of the budget) the score of the last
    result in the chosen ``scoring`` mode: ``"exact"`` (default; 1 or 0: type-normalised,
    column-order tolerant, row order graded only when the gold orders) or ``"intercode"``
    (InterCode's IoU x Kendall tau, clipped to [0, 1]; the raw value is in ``info``).

    ## Episode End
    ``terminated`` on ``submit``, or with ``end_on_success=True`` (default, InterCode's n-turn
    protocol) as soon as a query's result scores 1. ``truncated`` when the turn budget is spent.
    ``success``: the submitted (or last) result scores 1.

    ## Arguments
    ``max_turns`` (default 10, InterCode's), ``budget_mode``, ``render_mode``, ``tasks``
    (``"bundled"``, ``"intercode"``, ``"spider-dev"`` (the 1,034 Spider dev tasks; file from
    ``spider_dev_file``, ``$MULTITURN_ENVS_SPIDER_DEV`` or the cache), ``"all"``, a task file,
    or a list of :class:`SQLTask`), ``scoring``, ``end_on_success``, ``db_dir`` (extra SQLite
    databases), ``transpile`` (MySQL fallback), ``max_rows_shown``, ``max_cell_chars``,
    ``vm_instructions`` and ``query_timeout_s`` (one action's budget; ``query_seconds``, its
    old spelling, is read for one release with a ``DeprecationWarning``), ``max_value_bytes``,
    ``max_result_bytes``, ``max_db_bytes`` and ``max_observation_chars`` (the resource
    contract: ``docs/security.md``), ``hardness`` (keep
    only these levels), ``mysql_row_order`` (default on: MySQL 8's order where SQL leaves it
    open), ``mysql_strict`` (default off: refuse, with MySQL's error, queries MySQL 8 rejects
    and SQLite runs, e.g. under ``ONLY_FULL_GROUP_BY``), ``describe_types`` (``"bytes"``: DESC
    types as ``b'int'``; ``"str"``), ``clock`` (the fixed "now" of date functions).

    ## Turn Budget
    Owned by :class:`~multiturn_envs.core.TextEnv`: every reply is a turn, parse errors
    included.

    ## Oracle
    ``step_score``: the score of the action's result against the gold result (both modes are in
    ``info``); ``expert_action``: the gold query (followed by ``submit`` when
    ``end_on_success=False``); ``error_action``: a one-edit variant of the gold that runs and
    scores below 1 here; ``get_state``/``set_state`` include the database contents
    (``sqlite3`` serialize/deserialize, skipped while the copy is untouched).

    ## Version History
    * v0: initial version; MySQL 8 row order, PAD SPACE text columns, MySQL's functions with a
      fixed clock, ``information_schema``, MySQL's DESC and error texts, ``"spider-dev"``
      tasks, ``mysql_strict`` (measured against InterCode's published runs, see the env card).
    """

    max_tool_calls = 2  # execute_sql then submit
    not_picklable = not_copyable = (
        "it holds SQLite connections (the episode's private copy of the database and the "
        "pristine one)"
    )

    def __init__(
        self,
        max_turns: int | None = 10,
        budget_mode: BudgetMode = "hidden",
        render_mode: str | None = None,
        *,
        tasks: str | Path | Sequence[SQLTask] = "bundled",
        scoring: str = "exact",
        end_on_success: bool = True,
        db_dir: str | Path | None = None,
        transpile: bool = True,
        max_rows_shown: int = 20,
        max_cell_chars: int = 100,
        vm_instructions: int = 50_000_000,
        query_timeout_s: float = 5.0,
        max_value_bytes: int = 100_000,
        max_result_bytes: int = 16 * 2**20,
        max_db_bytes: int = 64 * 2**20,
        max_observation_chars: int = 16_000,
        hardness: Sequence[str] | None = None,
        mysql_row_order: bool = True,
        mysql_strict: bool = False,
        describe_types: str = "bytes",
        spider_dev_file: str | Path | None = None,
        clock: dt.datetime = DEFAULT_CLOCK,
        **old: Any,
    ) -> None:
        require_extra("MT/InterCode-SQL-v0", *ENV_EXTRAS["MT/InterCode-SQL-v0"])
        (query_timeout_s,) = renamed_kwargs(
            type(self).__name__,
            old,
            {"query_seconds": "query_timeout_s"},
            {"query_timeout_s": query_timeout_s},
            {"query_timeout_s": 5.0},
        ).values()
        super().__init__(max_turns=max_turns, budget_mode=budget_mode, render_mode=render_mode)
        if scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
        loaded = load_tasks(tasks, spider_dev_file)
        if hardness is not None:
            loaded = [t for t in loaded if t.hardness in set(hardness)]
        if not loaded:
            raise ValueError("no tasks selected")
        self._tasks: dict[str, SQLTask] = {}
        for task in loaded:
            if task.task_id in self._tasks:
                raise ValueError(f"duplicate task id {task.task_id!r}")
            self._tasks[task.task_id] = task
        self.scoring = scoring
        self.end_on_success = bool(end_on_success)
        self.transpile = bool(transpile)
        self.max_rows_shown = int(max_rows_shown)
        self.max_cell_chars = int(max_cell_chars)
        self.max_observation_chars = int(max_observation_chars)
        if self.max_observation_chars < 200:
            raise ValueError(f"max_observation_chars must be >= 200, got {max_observation_chars}")
        self._limits = QueryLimits(
            vm_instructions=int(vm_instructions),
            seconds=float(query_timeout_s),
            max_result_bytes=int(max_result_bytes),
            max_pages=max(1, int(max_db_bytes) // 4096),
            max_value_bytes=int(max_value_bytes),
            clock=clock,
        )
        self._catalog = DatabaseCatalog(db_dir, self._limits)
        if describe_types not in ("bytes", "str"):
            raise ValueError(f"describe_types must be 'bytes' or 'str', got {describe_types!r}")
        self.describe_types = describe_types
        self.mysql_row_order = bool(mysql_row_order)
        self.mysql_strict = bool(mysql_strict)
        self._rejections: QueryCache[str | None] = QueryCache()
        self._order_plans: QueryCache[tuple[str, str | None]] = QueryCache()
        self._divisions: QueryCache[str | None] = QueryCache()
        self._golds: dict[str, _Gold] = {}
        self._mutations: dict[str, list[str]] = {}
        self._clean_errors: dict[str, list[str]] = {}
        self._fallbacks: dict[str, tuple[str, ...]] = {}
        self._task: SQLTask | None = None
        self._conn: SandboxedConnection | None = None
        self._last: QueryResult | None = None
        self._last_scores: Scores | None = None

    # ------------------------------------------------------------------ tasks
    def task_ids(self) -> Sequence[str]:
        return list(self._tasks)

    def task(self, task_id: str | None = None) -> SQLTask:
        """The task ``task_id`` (default: the current one)."""
        if task_id is None:
            if self._task is None:
                raise RuntimeError("no task loaded; call reset()")
            return self._task
        return self._tasks[task_id]

    def gold_result(self, task_id: str | None = None) -> QueryResult:
        """The gold query's result on the pristine database (cached)."""
        return self._gold(self.task(task_id)).result

    def gold_orders(self, task_id: str | None = None) -> bool:
        """Whether the gold query orders its result (then the ``exact`` mode grades order)."""
        return self._gold(self.task(task_id)).order_matters

    def mysql_tables(self, db: str) -> dict[str, MySQLTable]:
        """MySQL's declarations of ``db``'s tables (Spider dev databases; empty for others)."""
        return self._catalog.mysql_tables(db)

    def _gold(self, task: SQLTask) -> _Gold:
        gold = self._golds.get(task.task_id)
        if gold is None:
            result = self.execute(self._catalog.pristine(task.db), task.gold, task.db)
            if not result.ok:
                raise RuntimeError(
                    f"the gold query of {task.task_id} fails on {task.db}: {result.error}"
                )
            gold = _Gold(result, outer_query_orders(task.gold))
            self._golds[task.task_id] = gold
        return gold

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        if task_id not in self._tasks:
            raise KeyError(f"unknown task id {task_id!r}")
        task = self._tasks[task_id]
        self._gold(task)
        self._open_episode(task, None)
        return (
            f"Database: {task.db}\nQuestion: {task.question}\n"
            "Reply with one SQL query per turn, or `submit` to submit the last result."
        )

    def _open_episode(self, task: SQLTask, data: bytes | None) -> None:
        if self._conn is not None:
            self._conn.close()
        self._task = task
        self._conn = (
            self._catalog.episode_copy(task.db)
            if data is None
            else SandboxedConnection.from_bytes(data, self._limits)
        )
        self._last = None
        self._last_scores = None

    # ------------------------------------------------------------------ stepping
    def run_query(self, sql: str) -> tuple[QueryResult, list[str], bool]:
        """Run one agent query on the episode's copy: (result, notes, transpiled)."""
        assert self._conn is not None and self._task is not None
        notes: list[str] = []
        if len(sql) > MAX_QUERY_CHARS:
            return (
                QueryResult(error=f"the query is longer than {MAX_QUERY_CHARS:,} characters"),
                notes,
                False,
            )
        first, rest = first_statement(sql)
        if rest:
            notes.append("Only the first statement was run; send one statement per turn.")
        ordinary = without_temporary(first)
        if ordinary is not None:
            first = ordinary
            notes.append(TEMPORARY_NOTE)
        problem = parse_bound_problem(first)
        if problem is not None and is_query(first) and ("/" in first or needs_mysql_order(first)):
            notes.append(
                f"The query is too large for the MySQL emulation ({problem}): it ran with "
                "SQLite's semantics (integer division, SQLite's row order)."
            )
        with self._conn.action_budget():
            return self._run_first(first, notes)

    def _run_first(self, first: str, notes: list[str]) -> tuple[QueryResult, list[str], bool]:
        """:meth:`run_query` of one statement, inside the action's budget."""
        assert self._conn is not None and self._task is not None
        db = self._task.db
        emulated = emulate(
            first,
            self._conn,
            db,
            mysql_tables=self._catalog.mysql_tables(db),
            describe_types=self.describe_types,
        )
        if emulated is not None:
            if emulated.note:
                notes.append(emulated.note)
            return emulated.result, notes, False
        result = self.execute(self._conn, first, db)
        if self.mysql_strict and result.ok and (rejected := self._mysql_rejection(first, db)):
            # only queries are checked (might_be_rejected), so nothing was written
            return QueryResult(error=rejected), notes, False
        if (
            result.ok
            or not self.transpile
            or not is_sqlite_error_worth_transpiling(result.error or "")
        ):
            return result, notes, False
        rewrite = transpile_mysql(first, db)
        if rewrite is None:
            return result, notes, False
        retried = self.execute(self._conn, rewrite, db)
        if not retried.ok:
            return result, notes, False
        notes.append(
            f"SQLite rejected the query as written; ran its MySQL-to-SQLite rewrite: {rewrite}"
        )
        return retried, notes, True

    @property
    def last_result(self) -> QueryResult | None:
        """The result of the episode's last query (``None`` before the first)."""
        return self._last

    def _mysql_rejection(self, sql: str, db: str) -> str | None:
        """MySQL 8's error for a query SQLite accepts (``mysql_strict``; cached per query)."""
        key = (db, sql)
        if key in self._rejections:
            return self._rejections[key]
        tables = self._catalog.mysql_tables(db)
        rejected = mysql_rejects(sql, tables, db) if tables and might_be_rejected(sql) else None
        self._rejections.put(key, rejected, len(sql) + len(rejected or ""))
        return rejected

    def execute(self, conn: SandboxedConnection, sql: str, db: str) -> QueryResult:
        """Run one statement on ``conn`` as InterCode's MySQL would order its rows.

        With ``mysql_row_order`` (default), a query SQL leaves unordered (GROUP BY without an
        index on the key, ties under ORDER BY, set operations) is run in the form that gives
        MySQL 8's order (:mod:`.mysql_order`); the plain SQLite result is used when that form
        does not apply or fails. A query that divides runs with MySQL's exact ``/``
        (:func:`.dialect.mysql_division`). Gold and agent queries go through here alike.
        """
        divided = self._exact_division(sql)
        result = conn.execute(divided) if divided is not None else conn.execute(sql)
        if divided is not None:
            if result.ok:  # MySQL's exact division; otherwise the query as written
                sql = divided
            else:
                result = conn.execute(sql)
        if (
            not self.mysql_row_order
            or not result.ok
            or result.rows is None
            or not needs_mysql_order(sql)
        ):
            return result
        plan = self._order_plans.get((db, sql))
        if plan is None:
            rewritten = order_like_mysql(sql, self._catalog.indexed_columns(db))
            plan = ("rewrite", rewritten) if rewritten is not None else ("set", None)
            self._order_plans.put((db, sql), plan, len(sql) + len(rewritten or ""))
        if plan[0] == "set":
            combined = run_set_operation(sql, lambda leaf: self.execute(conn, leaf, db))
            if combined is None:
                self._order_plans.put((db, sql), ("none", None), len(sql))
                return result
            return combined
        if plan[0] == "rewrite" and plan[1] is not None:
            ordered = conn.execute(plan[1])
            if ordered.ok and ordered.rows is not None:
                return ordered
        return result

    def _exact_division(self, sql: str) -> str | None:
        """``sql`` with MySQL's ``/`` (cached per query), or ``None`` when it has none."""
        if not is_query(sql) or "/" not in sql:
            return None
        if sql in self._divisions:
            return self._divisions[sql]
        divided = mysql_division(sql)
        self._divisions.put(sql, divided, len(sql) + len(divided or ""))
        return divided

    def _score(self, result: QueryResult | None) -> Scores:
        assert self._task is not None
        gold = self._gold(self._task)
        if result is None or result.rows is None:
            return Scores(0.0, 0.0, 0.0)
        return score_result(
            result.rows,
            gold.result.rows or [],
            order_matters=gold.order_matters,
            pred_width=len(result.columns),
            gold_width=len(gold.result.columns),
        )

    def _render(self, result: QueryResult, notes: list[str], sql: str = "") -> str:
        assert self._task is not None
        lines = [*notes]
        if not result.ok:
            message = mysql_error(result.error or "", self._task.db, sql)
            lines.append(f"Error executing query: {message}")
        elif result.rows is None:
            if not notes or notes[-1] != "Database changed":
                lines.append(
                    f"Query OK, {result.rows_affected} rows affected "
                    "(in this episode's private copy of the database)."
                )
        else:
            shown = [
                tuple(self._cell(v) for v in row) for row in result.rows[: self.max_rows_shown]
            ]
            lines.append(repr(shown))
            if result.total_rows > len(shown):
                lines.append(
                    f"[{result.total_rows} rows in total; the first {len(shown)} are shown]"
                )
        return self._cut("\n".join(lines))

    def _cut(self, text: str) -> str:
        """``text`` within ``max_observation_chars`` (the cut is marked and says how much)."""
        limit = self.max_observation_chars
        if len(text) <= limit:
            return text
        note = f"\n[observation cut: {len(text):,} characters, the first {{:,}} are shown]"
        keep = limit - len(note.format(limit))
        return text[:keep] + note.format(keep)

    def _cell(self, value: Any) -> Any:
        if isinstance(value, str) and len(value) > self.max_cell_chars:
            return value[: self.max_cell_chars] + "…"
        if isinstance(value, bytes) and len(value) > self.max_cell_chars:
            return value[: self.max_cell_chars] + b"..."
        return value

    def tools(self) -> Sequence[Tool]:
        return TOOLS

    def _read(self, action: str) -> ParsedAction:
        """The query and/or submit of a reply: tool calls, else the text forms."""
        calls = self.read_tool_calls(action)
        if calls is None:
            return parse_action(action)
        if isinstance(calls, list):
            parsed = parsed_of_calls(calls)
            if parsed.sql is not None and not parsed.sql.strip():
                return ParsedAction(
                    None, False, f"Tool call error: the query is empty. {FORMAT_HINT}"
                )
            return parsed
        return ParsedAction(None, False, str(calls))

    def as_tool_call(self, action: str) -> ToolCall | None:
        parsed = parse_action(action)
        if parsed.error is not None or parsed.submit:
            return None
        return ToolCall("execute_sql", {"query": parsed.sql})

    def _step(self, action: str) -> StepOutcome:
        assert self._task is not None
        last_turn = self.turns_left is not None and self.turns_left <= 1
        parsed = self._read(action)
        extra: dict[str, Any] = {"db": self._task.db, "scoring": self.scoring, "transpiled": False}
        if parsed.error is not None:
            return self._refuse(parsed.error)
        observation = ""
        if parsed.sql is not None:
            result, notes, transpiled = self.run_query(parsed.sql)
            self._last = result
            self._last_scores = self._score(result)
            observation = self._render(result, notes, parsed.sql)
            extra["transpiled"] = transpiled
            extra["query_error"] = not result.ok
        scores = self._last_scores or Scores(0.0, 0.0, 0.0)
        score = scores.get(self.scoring)
        solved = score >= 1.0
        extra.update(self._score_info(scores))
        if parsed.submit:
            verdict = "correct" if solved else "not correct"
            if self._last is None:
                observation = "Submitted, but no query has been run yet: nothing to grade."
            else:
                observation = (observation + "\n" if observation else "") + (
                    f"Submitted. The answer is {verdict} (score {score:.2f})."
                )
            return StepOutcome(observation, float(score), True, solved, float(score), None, extra)
        terminated = self.end_on_success and solved
        if terminated:
            observation += "\nThis result answers the question (score 1.00)."
        reward = score if (terminated or last_turn) else 0.0
        return StepOutcome(
            observation, float(reward), terminated, solved, float(score), None, extra
        )

    def _refuse(self, message: str) -> StepOutcome:
        """A reply that holds no SQL (or is too long to read): a turn spent, nothing run."""
        assert self._task is not None
        last_turn = self.turns_left is not None and self.turns_left <= 1
        extra: dict[str, Any] = {"db": self._task.db, "scoring": self.scoring, "transpiled": False}
        solved = self._last_scores is not None and self._last_scores.get(self.scoring) >= 1.0
        reward = self._last_scores.get(self.scoring) if (last_turn and self._last_scores) else 0.0
        extra.update(self._score_info(None))
        return StepOutcome(message, float(reward), False, solved, 0.0, message, extra)

    @staticmethod
    def _score_info(scores: Scores | None) -> dict[str, float]:
        s = scores or Scores(0.0, 0.0, 0.0)
        return {
            "score_exact": float(s.exact),
            "score_intercode": float(s.intercode),
            "intercode_reward_raw": float(s.intercode_raw),
        }

    # ------------------------------------------------------------------ snapshots
    def _get_state(self) -> Any:
        assert self._conn is not None and self._task is not None
        return {
            "task_id": self._task.task_id,
            "db_bytes": self._conn.serialize() if self._conn.dirty else None,
            "last": self._last,
            "last_scores": self._last_scores,
        }

    def _set_state(self, state: Any) -> None:
        task = self._tasks[state["task_id"]]
        data = state["db_bytes"]
        keep = (
            data is None and self._task is task and self._conn is not None and not self._conn.dirty
        )
        if not keep:
            self._open_episode(task, data)
        self._last = state["last"]
        self._last_scores = state["last_scores"]

    def state_key(self) -> str:
        digest = hashlib.sha1(self._last_observation.encode("utf-8", "surrogatepass"))
        if self._task is not None:
            digest.update(self._task.task_id.encode())
        if self._conn is not None and self._conn.dirty:
            digest.update(self._conn.serialize())
        return digest.hexdigest()[:16]

    # ------------------------------------------------------------------ oracle
    def expert_action(self) -> str:
        gold = self.task().gold
        return gold if self.end_on_success else f"{gold}\nsubmit"

    def _schema(self) -> dict[str, list[str]]:
        assert self._conn is not None
        return self._conn.schema()

    def _wrong_queries(self) -> list[str]:
        """Gold variants that run and score below 1 at the current state (cached while clean)."""
        task = self.task()
        assert self._conn is not None
        if not self._conn.dirty and task.task_id in self._clean_errors:
            return self._clean_errors[task.task_id]
        if task.task_id not in self._mutations:
            schema = self._catalog.pristine(task.db).schema()
            tables = sorted(schema)
            fallbacks = [f'SELECT * FROM "{tables[0]}" LIMIT 1'] if tables else []
            fallbacks += ["SELECT 'no answer' AS answer", "SELECT -1 AS answer"]
            self._fallbacks[task.task_id] = tuple(fallbacks)
            self._mutations[task.task_id] = gold_mutations(task.gold, schema) + fallbacks
        valid: list[str] = []
        fallback: list[str] = []
        for sql in self._mutations[task.task_id]:
            result = self._conn.execute(sql)
            if (
                result.ok
                and result.rows is not None
                and self._score(result).get(self.scoring) < 1.0
            ):
                (fallback if sql in self._fallbacks.get(task.task_id, ()) else valid).append(sql)
        valid = valid or fallback[:1]
        if not self._conn.dirty:
            self._clean_errors[task.task_id] = valid
        return valid

    def error_action(self, rng: np.random.Generator) -> str:
        wrong = self._wrong_queries()
        if not wrong:
            return "SHOW TABLES"
        return wrong[int(rng.integers(len(wrong)))]

    def random_action(self, rng: np.random.Generator) -> str:
        """A random exploratory query of the kinds agents send (never ``submit``)."""
        if self._conn is None:
            return "SHOW TABLES"
        tables = sorted(self._schema()) or ["sqlite_master"]
        table = tables[int(rng.integers(len(tables)))]
        kinds = (
            "SHOW TABLES",
            f"DESC {table}",
            f"SELECT * FROM {table} LIMIT 5",
            f"SELECT count(*) FROM {table}",
        )
        if rng.random() < 0.25:
            return self.error_action(rng)
        return kinds[int(rng.integers(len(kinds)))]

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT + "\n" + FORMAT_HINT

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._catalog.close()
