"""Sandboxed SQLite connections: a pristine read-only copy per database, a private copy per episode.

Why this module exists: InterCode ran the agent's queries and the gold query on one shared MySQL
session, so an agent could ``DELETE`` the gold's rows, submit an empty result and score 1, and its
changes leaked into later episodes. Here:

* each database is loaded once into memory from its file (opened read-only) and never written:
  the gold query runs on it with every write denied;
* each episode gets its own in-memory copy (SQLite's backup API, ~0.1-0.4 ms), so whatever the
  agent runs changes only that copy;
* an authorizer denies what could reach past the copy or break determinism: ``ATTACH`` (also
  behind ``VACUUM INTO``), ``DETACH``, transactions and savepoints (every statement autocommits on
  the private copy), any ``PRAGMA`` but a few read-only schema ones, ``load_extension`` and the
  non-deterministic ``random()``/``randomblob()``;
* a progress handler stops runaway queries: a deterministic budget of SQLite VM instructions
  (identical runs stop at the identical point) plus a wall-clock backstop;
* ``max_page_count`` bounds how large the agent can grow its copy, and temp tables stay in memory.
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

from multiturn_envs.envs.intercode_sql.functions import (
    DEFAULT_CLOCK,
    MySQLClock,
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
DENIED_FUNCTIONS: frozenset[str] = frozenset({"load_extension", "random", "randomblob"})
_READ_ACTIONS: frozenset[int] = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_PROGRESS_EVERY = 1_000  # VM instructions between progress-handler calls


@dataclass
class Limits:
    """Resource limits of one agent query.

    Attributes:
        vm_instructions: SQLite VM instructions one query may run (deterministic cut-off).
        seconds: wall-clock backstop for one query.
        max_rows: rows kept for scoring and display; further rows are only counted.
        max_pages: pages (4 KiB) the episode's copy may grow to.
        clock: the fixed "now" of MySQL's date functions (episodes replay exactly).
    """

    vm_instructions: int = 50_000_000
    seconds: float = 5.0
    max_rows: int = 100_000
    max_pages: int = 16_384
    clock: dt.datetime = DEFAULT_CLOCK


@dataclass
class QueryResult:
    """The outcome of one statement.

    ``rows`` is ``None`` when the statement returned no result set (DDL/DML) or failed;
    ``error`` holds SQLite's message on failure; ``total_rows`` counts every row produced even
    when only ``max_rows`` were kept (``truncated``).
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
    dirty: bool = False
    denied: list[str] = field(default_factory=list)
    ticks: int = 0
    max_ticks: int = 0
    deadline: float = 0.0
    stopped: str | None = None


def _make_authorizer(guard: _Guard) -> Callable[..., int]:
    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, _: Any) -> int:
        if guard.trusted:
            return sqlite3.SQLITE_OK
        if db == "information_schema" and action not in _READ_ACTIONS:
            guard.denied.append("information_schema is read-only")
            return sqlite3.SQLITE_DENY
        if action in _READ_ACTIONS:
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
                guard.denied.append(f"function {arg2}() is disabled in this sandbox")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            if (arg1 or "").lower() in READ_ONLY_PRAGMAS:
                return sqlite3.SQLITE_OK
            guard.denied.append(f"PRAGMA {arg1} is not allowed (read-only schema pragmas only)")
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            guard.denied.append("ATTACH/DETACH (and VACUUM INTO) cannot reach other databases")
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            guard.denied.append(
                "transactions are not needed: each statement autocommits on this episode's copy"
            )
            return sqlite3.SQLITE_DENY
        if guard.read_only:
            guard.denied.append("this connection is read-only")
            return sqlite3.SQLITE_DENY
        guard.dirty = True
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
        if guard.ticks % 64 == 0 and time.perf_counter() > guard.deadline:
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

    def __init__(self, conn: sqlite3.Connection, *, read_only: bool, limits: Limits) -> None:
        self._conn = conn
        self._guard = _Guard(read_only=read_only)
        self.limits = limits
        self.read_only = read_only
        self.clock = MySQLClock(limits.clock)
        self._rand = StatementRandom()
        register_mysql_functions(conn, self.clock, self._rand)
        with self.trusted():
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute(f"PRAGMA max_page_count = {int(limits.max_pages)}")
            if read_only:
                conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_make_authorizer(self._guard))
        conn.set_progress_handler(_make_progress_handler(self._guard), _PROGRESS_EVERY)

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _blank() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        return conn

    @classmethod
    def load_file(cls, path: Path, limits: Limits | None = None) -> SandboxedConnection:
        """A read-only, in-memory copy of the database file at ``path`` (the file is opened
        read-only and closed again)."""
        source = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            conn = cls._blank()
            source.backup(conn)
        finally:
            source.close()
        return cls(conn, read_only=True, limits=limits or Limits())

    @classmethod
    def from_script(cls, script: str, limits: Limits | None = None) -> SandboxedConnection:
        """A read-only database built by running a trusted SQL script (the bundled databases)."""
        conn = cls._blank()
        conn.executescript(script)
        return cls(conn, read_only=True, limits=limits or Limits())

    @classmethod
    def copy_of(
        cls, source: SandboxedConnection, limits: Limits | None = None
    ) -> SandboxedConnection:
        """A private, writable copy of ``source`` (SQLite's online backup)."""
        conn = cls._blank()
        with source.trusted():
            source._conn.backup(conn)
        return cls(conn, read_only=False, limits=limits or source.limits)

    @classmethod
    def from_bytes(cls, data: bytes, limits: Limits | None = None) -> SandboxedConnection:
        conn = cls._blank()
        cast(Any, conn).deserialize(data)  # Python >= 3.11
        restored = cls(conn, read_only=False, limits=limits or Limits())
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
        with self.trusted():
            data: bytes = cast(Any, self._conn).serialize()  # Python >= 3.11
            return data

    @contextmanager
    def trusted(self) -> Iterator[sqlite3.Connection]:
        """Run the env's own statements (schema introspection, setup) past the policy."""
        previous = self._guard.trusted
        self._guard.trusted = True
        try:
            yield self._conn
        finally:
            self._guard.trusted = previous

    def close(self) -> None:
        self._conn.close()

    # ------------------------------------------------------------------ execution
    def execute(self, sql: str) -> QueryResult:
        """Run one untrusted statement; every failure comes back as ``QueryResult.error``."""
        guard = self._guard
        guard.denied.clear()
        guard.stopped = None
        guard.ticks = 0
        guard.max_ticks = max(1, self.limits.vm_instructions // _PROGRESS_EVERY)
        guard.deadline = time.perf_counter() + self.limits.seconds
        before = self._conn.total_changes
        self._rand.reseed(sql)
        try:
            cursor = self._conn.execute(mysql_surface(sql, self.clock))
            columns = tuple(d[0] for d in cursor.description) if cursor.description else ()
            if cursor.description is None:
                return QueryResult(rows_affected=self._conn.total_changes - before)
            rows: list[Row] = []
            total = 0
            for row in cursor:
                if total < self.limits.max_rows:
                    rows.append(row)
                total += 1
            return QueryResult(
                columns=columns, rows=rows, total_rows=total, truncated=total > len(rows)
            )
        except Exception as exc:  # sqlite3 errors, ValueError (NUL), UnicodeEncodeError, ...
            return QueryResult(error=self._message(exc), stopped=guard.stopped)

    def _message(self, exc: Exception) -> str:
        guard = self._guard
        if guard.stopped == "instructions":
            return (
                f"query stopped: it exceeded the budget of {self.limits.vm_instructions:,} "
                "SQLite VM instructions"
            )
        if guard.stopped == "time":
            return f"query stopped: it ran longer than {self.limits.seconds:g} s"
        if guard.denied:
            return f"not authorized: {guard.denied[0]}"
        if isinstance(exc, UnicodeEncodeError):
            return "the query is not valid UTF-8 text"
        return str(exc) or type(exc).__name__
