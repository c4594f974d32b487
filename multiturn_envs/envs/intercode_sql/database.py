"""Sandboxed SQLite connections: a pristine read-only copy per database, a private copy per episode.

Why this module exists: InterCode ran the agent's queries and the gold query on one shared MySQL
session, so an agent could ``DELETE`` the gold's rows, submit an empty result and score 1, and its
changes leaked into later episodes. Here:

* each database is loaded once into memory from its file (opened read-only) and never written:
  the gold query runs on it with every write denied;
* each episode gets its own in-memory copy (SQLite's backup API, ~0.1-0.4 ms), so whatever the
  agent runs changes only that copy;
* an authorizer *allows* a fixed list of statement kinds and functions and denies everything
  else (``docs/security.md``): reads, writes to the episode's own copy, read-only schema
  pragmas, and SQLite's and our MySQL functions. Denied, among others: ``ATTACH``
  (also behind ``VACUUM``), transactions and savepoints (every statement autocommits on the
  private copy), virtual tables (the FTS3 tokenizer interface lets SQL call a C pointer it
  chose: a segfault), ``load_extension``, ``fts3_tokenizer``, the non-deterministic
  ``random()``/``randomblob()``, temporary objects (they would live outside the copy's 64 MiB
  bound and outside its snapshots; the env turns MySQL's ``CREATE TEMPORARY TABLE`` into an
  ordinary table of the copy), and the raw-page and statement-list tables
  (``sqlite_dbpage``, ``dbstat``, ``sqlite_stmt``);
* SQLite's own limits are lowered (``Connection.setlimit``): a value (string or blob) holds at
  most ``QueryLimits.max_value_bytes`` (``hex(zeroblob(5e8))`` would take 2.4 GB), triggers nest 32
  deep, a program has at most a million VM instructions;
* a progress handler stops runaway queries: a deterministic budget of SQLite VM instructions
  (identical runs stop at the identical point) plus a wall-clock backstop, shared by every
  statement one agent action runs (:meth:`SandboxedConnection.action_budget`);
* work SQLite does before its VM runs is bounded too: a statement may expand, through the views
  and triggers it reaches, to at most ``QueryLimits.max_expanded_sql`` characters of SQL
  (:mod:`.expansion`), and its compilation may consult the authorizer at most
  :data:`MAX_AUTHORIZER_CALLS` times;
* ``max_page_count`` bounds how large the agent can grow its copy; SQLite's scratch storage
  (sorts, ``DISTINCT``, materialised subqueries) spills to temporary files beyond its small page
  cache rather than growing in memory; rows kept for scoring are capped in number and bytes.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from multiturn_envs.deprecation import renamed_attribute
from multiturn_envs.envs.intercode_sql.expansion import SchemaWeights
from multiturn_envs.envs.intercode_sql.functions import (
    DEFAULT_CLOCK,
    MYSQL_FUNCTION_NAMES,
    MySQLClock,
    Regexp,
    StatementRandom,
    mysql_surface,
    register_mysql_functions,
)

Row = tuple[Any, ...]

READ_ONLY_PRAGMAS: frozenset[str] = frozenset(
    {
        "table_info",
        "table_xinfo",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "table_list",
        "collation_list",
        "function_list",
    }
)
SQLITE_FUNCTIONS: frozenset[str] = frozenset(
    {
        # core scalar functions
        "abs", "char", "coalesce", "concat", "concat_ws", "format", "glob", "hex", "ifnull",
        "iif", "instr", "last_insert_rowid", "changes", "total_changes", "length", "like",
        "likelihood", "likely", "unlikely", "lower", "upper", "ltrim", "rtrim", "trim", "max",
        "min", "nullif", "octet_length", "printf", "quote", "replace", "round", "sign",
        "soundex", "sqlite_version", "substr", "substring", "typeof", "unhex", "unicode",
        "zeroblob",
        # date and time
        "date", "time", "datetime", "julianday", "unixepoch", "strftime", "timediff",
        "current_date", "current_time", "current_timestamp",
        # aggregates and window functions
        "avg", "count", "group_concat", "string_agg", "sum", "total", "row_number", "rank",
        "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead", "first_value",
        "last_value", "nth_value",
        # math
        "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "ceiling", "cos",
        "cosh", "degrees", "exp", "floor", "ln", "log", "log10", "log2", "mod", "pi", "pow",
        "power", "radians", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
        # JSON
        "json", "json_array", "json_array_length", "json_extract", "json_insert", "json_object",
        "json_patch", "json_quote", "json_remove", "json_replace", "json_set", "json_type",
        "json_valid", "json_group_array", "json_group_object", "->", "->>",
        # SQLite's internal helpers of ALTER TABLE (not callable from SQL text)
        "sqlite_rename_column", "sqlite_rename_table", "sqlite_rename_test",
        "sqlite_rename_quotefix", "sqlite_drop_column",
    }
)  # fmt: skip
"""SQLite's built-in functions the sandbox allows (the authorizer denies every other name)."""
ALLOWED_FUNCTIONS: frozenset[str] = SQLITE_FUNCTIONS | MYSQL_FUNCTION_NAMES
"""Every function an agent's SQL may call: SQLite's safe built-ins and our MySQL ones."""
HIDDEN_TABLES: frozenset[str] = frozenset({"sqlite_dbpage", "dbstat", "sqlite_stmt"})
"""Eponymous virtual tables denied: raw database pages, page statistics, and the connection's
prepared statements (which would show the env's own queries)."""
MAX_AUTHORIZER_CALLS = 100_000
"""Authorizer consultations one statement's compilation may make (a compile-time work bound)."""

_READ_ACTIONS: frozenset[int] = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_WRITE_ACTIONS: frozenset[int] = frozenset(
    {
        sqlite3.SQLITE_INSERT,
        sqlite3.SQLITE_UPDATE,
        sqlite3.SQLITE_DELETE,
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_CREATE_TRIGGER,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_DROP_VIEW,
        sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_ALTER_TABLE,
        sqlite3.SQLITE_REINDEX,
        sqlite3.SQLITE_ANALYZE,
    }
)
# writes after which the views and triggers (and so statements' expanded sizes) may differ
_SCHEMA_ACTIONS: frozenset[int] = frozenset(
    {
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_CREATE_TRIGGER,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_DROP_VIEW,
        sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_ALTER_TABLE,
    }
)
_CREATE_ACTIONS: frozenset[int] = frozenset(
    {
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_CREATE_TRIGGER,
    }
)
_TEMP_ACTIONS: frozenset[int] = frozenset(
    {
        sqlite3.SQLITE_CREATE_TEMP_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_INDEX,
        sqlite3.SQLITE_CREATE_TEMP_VIEW,
        sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
        sqlite3.SQLITE_DROP_TEMP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_INDEX,
        sqlite3.SQLITE_DROP_TEMP_VIEW,
        sqlite3.SQLITE_DROP_TEMP_TRIGGER,
    }
)
_DENIED_WHY: dict[int, str] = {
    sqlite3.SQLITE_ATTACH: "ATTACH/DETACH (and VACUUM) cannot reach other databases",
    sqlite3.SQLITE_DETACH: "ATTACH/DETACH (and VACUUM) cannot reach other databases",
    sqlite3.SQLITE_TRANSACTION: (
        "transactions are not needed: each statement autocommits on this episode's copy"
    ),
    sqlite3.SQLITE_SAVEPOINT: (
        "transactions are not needed: each statement autocommits on this episode's copy"
    ),
    sqlite3.SQLITE_CREATE_VTABLE: "virtual tables are not available in this sandbox",
    sqlite3.SQLITE_DROP_VTABLE: "virtual tables are not available in this sandbox",
}
_TABLE_ACTIONS: frozenset[int] = frozenset(
    {sqlite3.SQLITE_READ, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
)
_PROGRESS_EVERY = 1_000  # VM instructions between progress-handler calls (each checks the clock)

# SQLite's run-time limits (sqlite3_limit ids; Python < 3.12 lacks some constant names)
_LIMIT_LENGTH = 0
_SQLITE_LIMITS: dict[int, int] = {
    1: 1_000_000,  # SQL_LENGTH: bytes of one statement's text (the env caps queries first)
    2: 2_000,  # COLUMN
    3: 1_000,  # EXPR_DEPTH
    4: 500,  # COMPOUND_SELECT
    5: 1_000_000,  # VDBE_OP: instructions of one compiled program
    6: 127,  # FUNCTION_ARG
    7: 1,  # ATTACHED (the env's own information_schema)
    8: 10_000,  # LIKE_PATTERN_LENGTH
    9: 999,  # VARIABLE_NUMBER
    10: 32,  # TRIGGER_DEPTH
    11: 0,  # WORKER_THREADS
}


@dataclass
class QueryLimits:
    """Resource limits of one agent action (and of the episode's copy).

    Attributes:
        vm_instructions: SQLite VM instructions one action may run (deterministic cut-off).
        seconds: wall-clock backstop for one action.
        max_rows: rows kept for scoring and display; further rows are only counted.
        max_result_bytes: bytes of rows kept (text and blobs by length, other values as 8);
            rows past it are only counted.
        max_pages: pages (4 KiB) the episode's copy may grow to (16,384: 64 MiB).
        max_value_bytes: the largest string or blob a statement may build or read
            (``SQLITE_LIMIT_LENGTH``).
        max_expanded_sql: characters of SQL one statement may expand to through views and
            triggers (:mod:`.expansion`).
        clock: the fixed "now" of MySQL's date functions (episodes replay exactly).
    """

    vm_instructions: int = 50_000_000
    seconds: float = 5.0
    max_rows: int = 100_000
    max_result_bytes: int = 16 * 2**20
    max_pages: int = 16_384
    max_value_bytes: int = 100_000
    max_expanded_sql: int = 200_000
    clock: dt.datetime = DEFAULT_CLOCK


@dataclass
class QueryResult:
    """The outcome of one statement.

    ``rows`` is ``None`` when the statement returned no result set (DDL/DML) or failed;
    ``error`` holds SQLite's message on failure; ``total_rows`` counts every row produced even
    when only ``max_rows`` (or ``max_result_bytes``) were kept (``truncated``).
    """

    columns: tuple[str, ...] = ()
    rows: list[Row] | None = None
    total_rows: int = 0
    rows_affected: int = 0
    error: str | None = None
    truncated: bool = False
    stopped: str | None = None  # "instructions" or "time" when the progress handler fired

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Guard:
    """Per-connection policy state the authorizer and progress handler consult."""

    read_only: bool
    trusted: bool = False
    prepared_trusted: bool = False  # a statement was compiled with the policy off
    dirty: bool = False
    schema_changed: bool = False
    denied: list[str] = field(default_factory=list)
    auth_calls: int = 0
    ticks: int = 0
    max_ticks: int = 0
    deadline: float = 0.0
    stopped: str | None = None


def _make_authorizer(guard: _Guard) -> Callable[..., int]:
    def deny(reason: str) -> int:
        guard.denied.append(reason)
        return sqlite3.SQLITE_DENY

    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, _: Any) -> int:
        if guard.trusted:
            guard.prepared_trusted = True
            return sqlite3.SQLITE_OK
        guard.auth_calls += 1
        if guard.auth_calls > MAX_AUTHORIZER_CALLS:
            return deny("the statement is too large to compile in this sandbox")
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in ALLOWED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            return deny(f"function {arg2}() is not available in this sandbox")
        if action in _TABLE_ACTIONS and (arg1 or "").lower() in HIDDEN_TABLES:
            return deny(f"{arg1} is not available in this sandbox")
        if db == "information_schema" and action not in _READ_ACTIONS:
            return deny("information_schema is read-only")
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            if (arg1 or "").lower() in READ_ONLY_PRAGMAS:
                return sqlite3.SQLITE_OK
            return deny(f"PRAGMA {arg1} is not allowed (read-only schema pragmas only)")
        if action in _TEMP_ACTIONS or (action in _CREATE_ACTIONS and db == "temp"):
            return deny(
                "temporary objects are not available: create an ordinary table instead (it "
                "lives only in this episode's private copy)"
            )
        if action in _DENIED_WHY:
            return deny(_DENIED_WHY[action])
        if action not in _WRITE_ACTIONS:
            return deny(f"this kind of statement is not allowed (SQLite action {action})")
        if guard.read_only:
            return deny("this connection is read-only")
        guard.dirty = True
        if action in _SCHEMA_ACTIONS:
            guard.schema_changed = True
        return sqlite3.SQLITE_OK

    return authorize


def _make_progress_handler(guard: _Guard) -> Callable[[], int]:
    def progress() -> int:
        if guard.trusted:
            return 0
        guard.ticks += 1
        if guard.ticks > guard.max_ticks:
            guard.stopped = "instructions"
            return 1
        if time.perf_counter() > guard.deadline:
            guard.stopped = "time"
            return 1
        return 0

    return progress


def first_statement(sql: str) -> tuple[str, str]:
    """Split ``sql`` into its first complete statement and the rest (string-literal aware)."""
    start = 0
    while True:
        idx = sql.find(";", start)
        if idx < 0:
            return sql.strip(), ""
        # complete_statement rejects NUL; a NUL is an error SQLite reports when the text runs
        if sqlite3.complete_statement(sql[: idx + 1].replace("\x00", " ")):
            return sql[:idx].strip(), sql[idx + 1 :].strip()
        start = idx + 1


class SandboxedConnection:
    """An in-memory SQLite connection under the module's policy.

    Build one with :meth:`copy_of` (a private copy of a pristine database) or
    :meth:`from_bytes` (restore a snapshot).
    """

    def __init__(self, conn: sqlite3.Connection, *, read_only: bool, limits: QueryLimits) -> None:
        self._conn = conn
        self._guard = _Guard(read_only=read_only)
        self.limits = limits
        self.read_only = read_only
        self.clock = MySQLClock(limits.clock)
        self._rand = StatementRandom()
        self._regexp = Regexp()
        self._weights = SchemaWeights(self._views_and_triggers)
        self._in_action = False
        register_mysql_functions(conn, self.clock, self._rand, self._regexp)
        with self.trusted():
            # scratch b-trees and sorts spill to temporary files past the page cache
            conn.execute("PRAGMA temp_store = FILE")
            conn.execute(f"PRAGMA max_page_count = {int(limits.max_pages)}")
            if read_only:
                conn.execute("PRAGMA query_only = ON")
        setlimit = cast(Any, conn).setlimit  # Python >= 3.11, as serialize()
        setlimit(_LIMIT_LENGTH, int(limits.max_value_bytes))
        for limit, value in _SQLITE_LIMITS.items():
            setlimit(limit, value)
        self._authorizer = _make_authorizer(self._guard)
        conn.set_authorizer(self._authorizer)
        conn.set_progress_handler(_make_progress_handler(self._guard), _PROGRESS_EVERY)

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _blank() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        return conn

    @classmethod
    def load_file(cls, path: Path, limits: QueryLimits | None = None) -> SandboxedConnection:
        """A read-only, in-memory copy of the database file at ``path`` (the file is opened
        read-only and closed again)."""
        source = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            conn = cls._blank()
            source.backup(conn)
        finally:
            source.close()
        return cls(conn, read_only=True, limits=limits or QueryLimits())

    @classmethod
    def from_script(cls, script: str, limits: QueryLimits | None = None) -> SandboxedConnection:
        """A read-only database built by running a trusted SQL script (the bundled databases)."""
        conn = cls._blank()
        conn.executescript(script)
        return cls(conn, read_only=True, limits=limits or QueryLimits())

    @classmethod
    def copy_of(
        cls, source: SandboxedConnection, limits: QueryLimits | None = None
    ) -> SandboxedConnection:
        """A private, writable copy of ``source`` (SQLite's online backup)."""
        conn = cls._blank()
        with source.trusted():
            source._conn.backup(conn)
        copy = cls(conn, read_only=False, limits=limits or source.limits)
        copy._weights.copy_from(source._weights)  # same views and triggers: no reload
        return copy

    @classmethod
    def from_bytes(cls, data: bytes, limits: QueryLimits | None = None) -> SandboxedConnection:
        conn = cls._blank()
        cast(Any, conn).deserialize(data)  # Python >= 3.11
        restored = cls(conn, read_only=False, limits=limits or QueryLimits())
        restored._guard.dirty = True  # its contents may differ from the pristine database
        return restored

    # ------------------------------------------------------------------ state
    @property
    def dirty(self) -> bool:
        """Whether any statement may have changed this copy since it was made."""
        return self._guard.dirty

    def schema(self) -> dict[str, list[str]]:
        """Table name -> column names (SQLite's internal tables left out)."""
        with self.trusted() as raw:
            tables = [
                r[0]
                for r in raw.execute(
                    "SELECT name FROM sqlite_master "
                    "WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            ]
            return {
                t: [r[0] for r in raw.execute("SELECT name FROM pragma_table_info(?)", (t,))]
                for t in tables
            }

    def serialize(self) -> bytes:
        """The whole database (the agent cannot create objects outside it: no temporary ones)."""
        with self.trusted():
            data: bytes = cast(Any, self._conn).serialize()  # Python >= 3.11
            return data

    @contextmanager
    def trusted(self) -> Iterator[sqlite3.Connection]:
        """Run the env's own statements (schema introspection, setup) past the policy.

        SQLite authorizes a statement when it compiles it, and Python caches compiled
        statements by their text: an agent that sent the text of a statement the env compiled
        here (``DELETE FROM information_schema.TABLES``) would run it unchecked. So leaving
        the outermost trusted block after compiling anything expires every compiled statement
        (setting the authorizer again does), and each is checked anew before it runs again.
        """
        guard = self._guard
        previous = guard.trusted
        guard.trusted = True
        try:
            yield self._conn
        finally:
            guard.trusted = previous
            if not previous and guard.prepared_trusted:
                guard.prepared_trusted = False
                self._conn.set_authorizer(self._authorizer)

    def close(self) -> None:
        self._conn.close()

    # ------------------------------------------------------------------ budgets
    @contextmanager
    def action_budget(self) -> Iterator[None]:
        """Share one budget (VM instructions and seconds) among every statement run inside.

        One agent action may run several statements (MySQL's row order, exact division, a
        transpiled retry, each branch of a set operation); without a shared budget each would
        get the whole of it.
        """
        if self._in_action:
            yield
            return
        self._start_budget()
        self._in_action = True
        try:
            yield
        finally:
            self._in_action = False

    def _start_budget(self) -> None:
        guard = self._guard
        guard.ticks = 0
        guard.max_ticks = max(1, self.limits.vm_instructions // _PROGRESS_EVERY)
        guard.deadline = time.perf_counter() + self.limits.seconds

    def expansion_problem(self, sql: str) -> str | None:
        """Why ``sql`` may not be compiled here (too large once views are expanded), or ``None``."""
        weight = self._weights.weigh(sql)
        if weight <= self.limits.max_expanded_sql:
            return None
        return (
            "the statement expands, through the views and triggers it reaches, to more than "
            f"{self.limits.max_expanded_sql:,} characters of SQL"
        )

    def _views_and_triggers(self) -> list[tuple[str, str, str]]:
        with self.trusted() as raw:
            rows = raw.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger')"
            ).fetchall()
        return [(str(t), str(n), str(q or "")) for t, n, q in rows]

    # ------------------------------------------------------------------ execution
    def execute(self, sql: str) -> QueryResult:
        """Run one untrusted statement; every failure comes back as ``QueryResult.error``.

        Inside :meth:`action_budget` it draws on the action's budget, else it gets its own.
        """
        guard = self._guard
        if not self._in_action:
            self._start_budget()
        guard.stopped = None  # per statement; the budget it draws on may be the action's
        guard.denied.clear()
        guard.auth_calls = 0
        self._regexp.error = None
        problem = self.expansion_problem(sql)
        if problem is not None:
            return QueryResult(error=f"not authorized: {problem}")
        before = self._conn.total_changes
        self._rand.reseed(sql)
        try:
            cursor = self._conn.execute(mysql_surface(sql, self.clock))
            columns = tuple(d[0] for d in cursor.description) if cursor.description else ()
            if cursor.description is None:
                return QueryResult(rows_affected=self._conn.total_changes - before)
            rows, total, truncated = self._collect(cursor)
            return QueryResult(columns=columns, rows=rows, total_rows=total, truncated=truncated)
        except Exception as exc:  # sqlite3 errors, ValueError (NUL), UnicodeEncodeError, ...
            return QueryResult(error=self._message(exc), stopped=guard.stopped)
        finally:
            if guard.schema_changed:
                guard.schema_changed = False
                self._weights.invalidate()

    def _collect(self, cursor: sqlite3.Cursor) -> tuple[list[Row], int, bool]:
        """Rows kept (within ``max_rows`` and ``max_result_bytes``), rows in total, truncated."""
        max_rows, max_bytes = self.limits.max_rows, self.limits.max_result_bytes
        rows: list[Row] = []
        kept_bytes = 0
        keeping = True
        total = 0
        for row in cursor:
            total += 1
            if not keeping:
                continue
            size = 16
            for value in row:
                kind = type(value)
                size += len(value) if kind is str or kind is bytes else 8
            if len(rows) >= max_rows or kept_bytes + size > max_bytes:
                keeping = False
                continue
            rows.append(row)
            kept_bytes += size
        return rows, total, total > len(rows)

    def _message(self, exc: Exception) -> str:
        guard = self._guard
        if guard.stopped == "instructions":
            return (
                f"query stopped: it exceeded the budget of {self.limits.vm_instructions:,} "
                "SQLite VM instructions"
            )
        if guard.stopped == "time":
            return f"query stopped: it ran longer than {self.limits.seconds:g} s"
        if self._regexp.error is not None:
            return self._regexp.error
        if guard.denied:
            return f"not authorized: {guard.denied[0]}"
        if isinstance(exc, UnicodeEncodeError):
            return "the query is not valid UTF-8 text"
        message = str(exc) or type(exc).__name__
        if message == "string or blob too big":
            return (
                f"{message}: values are limited to {self.limits.max_value_bytes:,} bytes in "
                "this sandbox"
            )
        if message == "database or disk is full":
            size = self.limits.max_pages * 4096 / 2**20
            return f"{message}: this episode's copy of the database is limited to {size:g} MiB"
        return message


def __getattr__(name: str) -> Any:
    """Old names, read for one release (:mod:`multiturn_envs.deprecation`): ``Limits`` is
    ``QueryLimits`` (issue 33: three classes named ``Limits`` meant three things)."""
    return renamed_attribute(__name__, name, {"Limits": QueryLimits})
