"""MySQL habits on SQLite: SHOW/DESC/USE emulation, MySQL-to-SQLite transpiling, MySQL error text.

Agents prompted or trained on InterCode-SQL (MySQL 8) explore with ``SHOW TABLES``, ``DESC t``,
``SHOW COLUMNS FROM t`` and ``USE db``, write MySQL functions and ``LIMIT a, b``, and read
MySQL's error messages. SQLite rejects all of those statements, so:

* the introspection statements are answered from SQLite's catalog in MySQL's shape (DESC gives
  ``Field, Type, Null, Key, Default, Extra`` with MySQL-style type names);
* ``USE <this episode's db>`` is accepted; ``USE`` of any other database is refused (an episode
  has exactly one database, and the gold never runs anywhere else);
* a query SQLite fails on is transpiled from MySQL with sqlglot (``unsupported_level=RAISE``,
  references qualified with the episode's database name unqualified) and, only if the
  rewrite runs, its result is used and the observation says so;
* SQLite's commonest errors are worded as MySQL words them, the SQLite text kept beside.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multiturn_envs.envs.intercode_sql.database import QueryResult, SandboxedConnection
from multiturn_envs.envs.intercode_sql.mysql_schema import MySQLTable
from multiturn_envs.envs.intercode_sql.parse_bounds import parse_bound_problem

_IDENT = r"(?:`[^`]+`|\"[^\"]+\"|\[[^\]]+\]|[\w$]+)"
_QUALIFIED = rf"(?:{_IDENT}\s*\.\s*)?({_IDENT})"
_SHOW_TABLES = re.compile(rf"^SHOW\s+(?:FULL\s+)?TABLES(?:\s+(?:FROM|IN)\s+{_IDENT})?$", re.I)
_SHOW_DATABASES = re.compile(r"^SHOW\s+(?:DATABASES|SCHEMAS)$", re.I)
_DESCRIBE = re.compile(rf"^(?:DESC|DESCRIBE|EXPLAIN)\s+{_QUALIFIED}$", re.I)
_SHOW_COLUMNS = re.compile(
    rf"^SHOW\s+(?:FULL\s+)?(?:COLUMNS|FIELDS)\s+(?:FROM|IN)\s+{_QUALIFIED}"
    rf"(?:\s+(?:FROM|IN)\s+{_IDENT})?$",
    re.I,
)
_SHOW_CREATE = re.compile(rf"^SHOW\s+CREATE\s+TABLE\s+{_QUALIFIED}$", re.I)
_USE = re.compile(rf"^USE\s+({_IDENT})$", re.I)


def unquote(identifier: str) -> str:
    if identifier[:1] in '`"[' and len(identifier) >= 2:
        return identifier[1:-1]
    return identifier


@dataclass(frozen=True)
class Emulated:
    """A MySQL statement answered by the env: a result, and a note for the observation."""

    result: QueryResult
    note: str | None = None


def _tables(conn: SandboxedConnection) -> list[str]:
    return [name for name, _ in _tables_and_kinds(conn)]


def _tables_and_kinds(conn: SandboxedConnection) -> list[tuple[str, str]]:
    """``(name, "table" or "view")`` of the database's tables and views, by name."""
    with conn.trusted() as raw:
        rows = raw.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name COLLATE NOCASE"
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _find_table(conn: SandboxedConnection, name: str) -> str | None:
    for table in _tables(conn):
        if table.lower() == name.lower():
            return table
    return None


_TYPE_MAP = (
    (re.compile(r"^INTEGER$", re.I), "int"),
    (re.compile(r"^TEXT\((\d+)\)$", re.I), r"varchar(\1)"),
    (re.compile(r"^REAL\((\d+),\s*(\d+)\)$", re.I), r"decimal(\1,\2)"),
    (re.compile(r"^REAL$", re.I), "double"),
)


def mysql_type(declared: str) -> str:
    """SQLite's declared type as the MySQL type it was converted from (best effort)."""
    declared = declared.strip()
    for pattern, replacement in _TYPE_MAP:
        if pattern.match(declared):
            return pattern.sub(replacement, declared)
    return declared.lower()


def describe(
    conn: SandboxedConnection,
    table: str,
    db: str,
    mysql_tables: Mapping[str, MySQLTable] | None = None,
    describe_types: str = "bytes",
) -> QueryResult:
    """``DESC table`` in MySQL's shape.

    For a Spider table whose columns are still as declared, the rows are MySQL's own (types,
    ``PRI``/``UNI``/``MUL`` keys, defaults, ``auto_increment``) from the dump; otherwise they are
    derived from SQLite's catalog. ``describe_types="bytes"`` gives the Type and Default
    columns as bytes (``b'int'``), as the MySQL connector of InterCode's later runs returned
    them; ``"str"`` as its earlier runs (gpt-3.5) show them.
    """
    real = _find_table(conn, table)
    if real is None:
        return QueryResult(error=f"no such table: {table}")
    quoted = real.replace('"', '""')
    # a view's columns come from compiling its query: bounded like any statement's
    problem = conn.expansion_problem(f'SELECT * FROM "{quoted}"')
    if problem is not None:
        return QueryResult(error=f"not authorized: {problem}")
    with conn.trusted() as raw:
        info = raw.execute(f'PRAGMA table_info("{quoted}")').fetchall()
        fks = {r[3] for r in raw.execute(f'PRAGMA foreign_key_list("{quoted}")').fetchall()}
        create = raw.execute("SELECT sql FROM sqlite_master WHERE name = ?", (real,)).fetchone()
    declared = (mysql_tables or {}).get(real.lower())
    rows: list[tuple[Any, ...]]
    if declared is not None and [c.name for c in declared.columns] == [r[1] for r in info]:
        rows = [tuple(r) for r in declared.describe()]
    else:
        autoinc = bool(create and create[0] and "AUTOINCREMENT" in create[0].upper())
        rows = []
        for _, name, decl, notnull, default, pk in info:
            key = "PRI" if pk else ("MUL" if name in fks else "")
            null = "NO" if (notnull or pk) else "YES"
            default = None if default in (None, "NULL") else str(default).strip("'")
            extra = "auto_increment" if (pk and autoinc) else ""
            rows.append((name, mysql_type(decl or ""), null, key, default, extra))
    if describe_types == "bytes":  # the connector returned Type and Default as bytes
        rows = [
            (
                r[0],
                str(r[1]).encode(),
                r[2],
                r[3],
                None if r[4] is None else str(r[4]).encode(),
                r[5],
            )
            for r in rows
        ]
    columns = ("Field", "Type", "Null", "Key", "Default", "Extra")
    return QueryResult(columns=columns, rows=rows, total_rows=len(rows))


_TABLES_COLUMNS = (
    "TABLE_CATALOG, TABLE_SCHEMA COLLATE NOCASE, TABLE_NAME COLLATE NOCASE, TABLE_TYPE, ENGINE, "
    "VERSION, ROW_FORMAT, TABLE_ROWS, AVG_ROW_LENGTH, DATA_LENGTH, MAX_DATA_LENGTH, "
    "INDEX_LENGTH, DATA_FREE, AUTO_INCREMENT, CREATE_TIME, UPDATE_TIME, CHECK_TIME, "
    "TABLE_COLLATION, CHECKSUM, CREATE_OPTIONS, TABLE_COMMENT"
)
_COLUMNS_COLUMNS = (
    "TABLE_CATALOG, TABLE_SCHEMA COLLATE NOCASE, TABLE_NAME COLLATE NOCASE, "
    "COLUMN_NAME COLLATE NOCASE, ORDINAL_POSITION, COLUMN_DEFAULT, IS_NULLABLE, DATA_TYPE, "
    "CHARACTER_MAXIMUM_LENGTH, CHARACTER_OCTET_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, "
    "DATETIME_PRECISION, CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_TYPE, COLUMN_KEY, EXTRA, "
    "PRIVILEGES, COLUMN_COMMENT, GENERATION_EXPRESSION, SRS_ID"
)
_SCHEMATA_COLUMNS = (
    "CATALOG_NAME, SCHEMA_NAME COLLATE NOCASE, DEFAULT_CHARACTER_SET_NAME, "
    "DEFAULT_COLLATION_NAME, SQL_PATH, DEFAULT_ENCRYPTION"
)
_INFORMATION_SCHEMA = re.compile(r"\binformation_schema\b", re.IGNORECASE)


def refresh_information_schema(
    conn: SandboxedConnection, db: str, mysql_tables: Mapping[str, MySQLTable] | None = None
) -> None:
    """Attach (once) and fill an ``information_schema`` describing this episode's database.

    Only the episode's database is listed (InterCode's server also listed the other 19 and
    MySQL's own schemas); rows are rebuilt from the current catalog on each call, so tables
    the agent created appear. Values that depend on a server's history (create times, sizes)
    are NULL; ``TABLE_ROWS`` is the exact count of a table (NULL for a view, as in MySQL).
    """
    schema = db.lower()
    with conn.trusted() as raw:
        attached = {row[1] for row in raw.execute("PRAGMA database_list")}
        if "information_schema" not in attached:
            raw.execute("ATTACH DATABASE ':memory:' AS information_schema")
            raw.execute(f"CREATE TABLE information_schema.TABLES ({_TABLES_COLUMNS})")
            raw.execute(f"CREATE TABLE information_schema.COLUMNS ({_COLUMNS_COLUMNS})")
            raw.execute(f"CREATE TABLE information_schema.SCHEMATA ({_SCHEMATA_COLUMNS})")
        for name in ("TABLES", "COLUMNS", "SCHEMATA"):
            raw.execute(f"DELETE FROM information_schema.{name}")
        raw.execute(
            "INSERT INTO information_schema.SCHEMATA VALUES "
            "('def', ?, 'utf8mb4', 'utf8mb4_general_ci', NULL, 'NO')",
            (schema,),
        )
        for table, kind in _tables_and_kinds(conn):
            if kind == "view":  # as MySQL lists a view: no engine, no row count (never run)
                raw.execute(
                    "INSERT INTO information_schema.TABLES VALUES (?, ?, ?, 'VIEW', NULL, NULL, "
                    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
                    "NULL, NULL, 'VIEW')",
                    ("def", schema, table.lower()),
                )
            else:  # a table's exact row count: at most the episode copy's size to scan
                quoted = table.replace('"', '""')
                (count,) = raw.execute(f'SELECT count(*) FROM "{quoted}"').fetchone()
                raw.execute(
                    "INSERT INTO information_schema.TABLES VALUES (?, ?, ?, 'BASE TABLE', "
                    "'InnoDB', 10, 'Dynamic', ?, NULL, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL, "
                    "'utf8mb4_general_ci', NULL, '', '')",
                    ("def", schema, table.lower(), count),
                )
            described = describe(conn, table, db, mysql_tables, describe_types="str").rows or []
            for position, (field, type_, null, key, default, extra) in enumerate(described, 1):
                base = str(type_).split("(")[0].lower()
                raw.execute(
                    "INSERT INTO information_schema.COLUMNS VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, ?, ?, ?, "
                    "'select,insert,update,references', '', '', NULL)",
                    ("def", schema, table.lower(), field, position, default, null, base,
                     type_, key, extra),
                )  # fmt: skip


def emulate(
    sql: str,
    conn: SandboxedConnection,
    db: str,
    mysql_tables: Mapping[str, MySQLTable] | None = None,
    describe_types: str = "bytes",
) -> Emulated | None:
    """Answer a MySQL-only statement, or ``None`` when ``sql`` is none of them.

    A query that reads ``information_schema`` is not answered here: its tables are refreshed
    (:func:`refresh_information_schema`) and ``None`` lets SQLite run it.
    """
    text = " ".join(sql.split())
    if _INFORMATION_SCHEMA.search(text):
        refresh_information_schema(conn, db, mysql_tables)
        return None
    if _SHOW_TABLES.match(text):
        # lower_case_table_names=1 (InterCode's server): MySQL lists table names lower-cased
        rows = [(t.lower(),) for t in _tables(conn)]
        result = QueryResult(columns=(f"Tables_in_{db}",), rows=rows, total_rows=len(rows))
        return Emulated(result)
    if _SHOW_DATABASES.match(text):
        return Emulated(QueryResult(columns=("Database",), rows=[(db,)], total_rows=1))
    match = _DESCRIBE.match(text) or _SHOW_COLUMNS.match(text)
    if match and not text.upper().startswith(("EXPLAIN SELECT", "EXPLAIN QUERY")):
        return Emulated(describe(conn, unquote(match.group(1)), db, mysql_tables, describe_types))
    match = _SHOW_CREATE.match(text)
    if match:
        real = _find_table(conn, unquote(match.group(1)))
        if real is None:
            return Emulated(QueryResult(error=f"no such table: {unquote(match.group(1))}"))
        with conn.trusted() as raw:
            (create,) = raw.execute(
                "SELECT sql FROM sqlite_master WHERE name = ?", (real,)
            ).fetchone()
        result = QueryResult(columns=("Table", "Create Table"), rows=[(real, create)], total_rows=1)
        return Emulated(result)
    match = _USE.match(text)
    if match:
        name = unquote(match.group(1))
        if name.lower() == db.lower():
            return Emulated(QueryResult(), note="Database changed")
        return Emulated(
            QueryResult(error=f"unknown database '{name}': this episode has one database, '{db}'")
        )
    return None


_TEMPORARY = re.compile(r"^(\s*(?:CREATE|DROP))\s+TEMP(?:ORARY)?\s+(?=TABLE\b)", re.IGNORECASE)
TEMPORARY_NOTE = (
    "Temporary tables are ordinary tables of this episode's private copy here (it is "
    "discarded when the episode ends)."
)


def without_temporary(sql: str) -> str | None:
    """``sql`` with MySQL's ``CREATE``/``DROP TEMPORARY TABLE`` made an ordinary table's, or
    ``None`` when it is neither. The sandbox allows no temporary objects (they would live
    outside the copy's size bound and its snapshots); in an episode's private copy an ordinary
    table is just as private and just as temporary."""
    if sql[:40].lstrip()[:4].upper() not in ("CREA", "DROP"):
        return None
    rewritten, n = _TEMPORARY.subn(r"\1 ", sql, count=1)
    return rewritten if n else None


def transpile_mysql(sql: str, db: str) -> str | None:
    """``sql`` rewritten from MySQL to SQLite, or ``None`` when sqlglot cannot (or changes
    nothing). The caller must still execute-check it: sqlglot's output is not always valid.
    Introspection statements (``SHOW``, ``DESC``, ...) the env did not recognise are left alone:
    sqlglot has no SQLite form for them."""
    if sql.lstrip().upper().startswith(("SHOW", "DESC", "EXPLAIN", "USE")):
        return None
    if parse_bound_problem(sql) is not None:
        return None
    try:
        import sqlglot
        from sqlglot import exp
        from sqlglot.errors import ErrorLevel

        trees = sqlglot.parse(sql, read="mysql", error_level=ErrorLevel.RAISE)
        if len(trees) != 1 or trees[0] is None:
            return None
        tree = trees[0]
        for table in tree.find_all(exp.Table):
            if table.args.get("db") is not None and table.db.lower() == db.lower():
                table.set("db", None)
        for column in tree.find_all(exp.Column):
            if column.args.get("db") is not None and column.db.lower() == db.lower():
                column.set("db", None)
        out: str = tree.sql(dialect="sqlite", unsupported_level=ErrorLevel.RAISE)
    except Exception:
        return None
    if " ".join(out.split()) == " ".join(sql.split()):
        return None
    return out


_DIVISION = re.compile(r"/(?![*])")
_LITERALS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|/\*.*?\*/|--[^\n]*", re.S)


def mysql_division(sql: str) -> str | None:
    """``sql`` with MySQL's ``/`` (exact division: ``7/2`` is 3.5) where SQLite's would
    truncate integers (``7/2`` is 3), or ``None`` when the query has no division (or sqlglot
    cannot parse it). sqlglot renders each MySQL division as ``CAST(a AS REAL) / b``."""
    if "/" not in sql or parse_bound_problem(sql) is not None:
        return None
    if not _DIVISION.search(_LITERALS.sub("''", sql)):
        return None
    try:
        import sqlglot
        from sqlglot import exp
        from sqlglot.errors import ErrorLevel

        trees = sqlglot.parse(sql, read="mysql", error_level=ErrorLevel.RAISE)
        if len(trees) != 1 or trees[0] is None or trees[0].find(exp.Div) is None:
            return None
        return str(trees[0].sql(dialect="sqlite", unsupported_level=ErrorLevel.RAISE))
    except Exception:
        return None


_NO_TABLE = re.compile(r"^no such table: (?:\w+\.)?(.+)$")
_NO_COLUMN = re.compile(r"^no such column: (.+)$")
_SYNTAX = re.compile(r'^near "(.*)": syntax error$', re.S)
_UNRECOGNIZED = re.compile(r'^unrecognized token: "(.*)"$', re.S)
_AMBIGUOUS = re.compile(r"^ambiguous column name: (.+)$")


_CLAUSE_ORDER = (
    "field list",
    "where clause",
    "on clause",
    "group statement",
    "having clause",
    "order clause",
)


def unknown_column_clause(sql: str, column: str) -> str:
    """The clause MySQL names for an unknown ``column`` of ``sql`` (``'field list'`` when in
    doubt): the first clause holding it in the order MySQL resolves them (this order matches
    97.6% of the 1,500 such errors sampled from InterCode's published runs)."""
    if parse_bound_problem(sql) is not None:
        return "field list"
    try:
        import sqlglot
        from sqlglot import exp

        tree = sqlglot.parse_one(sql, read="mysql")
    except Exception:
        return "field list"
    parts = [p.strip('`"') for p in column.split(".")]
    name, table = parts[-1].lower(), (parts[-2].lower() if len(parts) > 1 else None)
    found: set[str] = set()
    for node in tree.find_all(exp.Column):
        if node.name.lower() != name or (table and node.table.lower() != table):
            continue
        child: Any = node
        kind = "field list"
        while child.parent is not None:
            parent, key = child.parent, child.arg_key
            if isinstance(parent, exp.Where):
                kind = "where clause"
            elif isinstance(parent, exp.Join) and key == "on":
                kind = "on clause"
            elif isinstance(parent, exp.Group):
                kind = "group statement"
            elif isinstance(parent, exp.Having):
                kind = "having clause"
            elif isinstance(parent, exp.Order):
                kind = "order clause"
            elif not (isinstance(parent, exp.Select) and key == "expressions"):
                child = parent
                continue
            break
        found.add(kind)
    return next((kind for kind in _CLAUSE_ORDER if kind in found), "field list")


def mysql_error(message: str, db: str, sql: str | None = None) -> str:
    """SQLite's error message in MySQL's words, as InterCode's agents read them.

    Table-name errors read exactly as MySQL's (``lower_case_table_names=1``: the name
    lower-cased); column errors name the clause MySQL names (given ``sql``); syntax errors quote,
    as MySQL does (80 characters at most), the rest of the query from the token where SQLite's
    parser stopped (MySQL's parser stops at the same token for 88% of the 4,069 syntax errors
    in InterCode's published runs that SQLite locates).
    """
    if (m := _NO_TABLE.match(message)) is not None:
        return f"Table '{db.lower()}.{m.group(1).lower()}' doesn't exist"
    if (m := _NO_COLUMN.match(message)) is not None:
        clause = unknown_column_clause(sql, m.group(1)) if sql else "field list"
        return f"Unknown column '{m.group(1)}' in '{clause}'"
    if (m := _AMBIGUOUS.match(message)) is not None:
        return f"Column '{m.group(1)}' in field list is ambiguous"
    if (m := _SYNTAX.match(message) or _UNRECOGNIZED.match(message)) is not None or (
        message == "incomplete input"
    ):
        token = m.group(1) if m else ""
        if sql is None:
            near, line = token, 1
        elif not token:  # the query ended too early: MySQL quotes nothing, on the last line
            near, line = "", sql.rstrip().count("\n") + 1
        else:  # MySQL quotes the rest of the query from where its parser stopped
            start = sql.find(token)
            near = sql[start:] if start >= 0 else token
            line = sql[: max(start, 0)].count("\n") + 1
        return (
            "You have an error in your SQL syntax; check the manual that corresponds to your "
            f"MySQL server version for the right syntax to use near '{near[:80]}' at line {line}"
        )
    return message


def is_sqlite_error_worth_transpiling(message: str) -> bool:
    """Errors a MySQL rewrite can fix (syntax, unknown functions, qualified names).

    An unknown table or column is worth a rewrite only when it is qualified (``db.table``):
    no rewrite finds a table that does not exist, and one of a plain unknown column would turn
    a backquoted name into a double-quoted one, which SQLite then reads as a string, where
    MySQL reports the unknown column.
    """
    unknown_column = message.startswith("no such column: ") and "." in message[16:]
    qualified_table = message.startswith("no such table: ") and "." in message[15:]
    return not message.startswith(("not authorized", "query stopped")) and (
        "syntax error" in message
        or "no such function" in message
        or qualified_table
        or unknown_column
        or "incomplete input" in message
        or "unrecognized token" in message
        or "wrong number of arguments" in message
    )
