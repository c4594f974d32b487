"""What MySQL knows about a table and SQLite does not: column types, keys and indexes.

InterCode's agents read ``DESC t`` as MySQL 8 prints it (``('Model', 'varchar(255)', 'YES',
'UNI', None, '')``), and MySQL's row order follows its indexes (a ``GROUP BY`` on an indexed
column comes out in key order, one on a plain column in order of first appearance). The
SQLite conversion keeps the data; this module keeps the rest, parsed from the dump's
``CREATE TABLE`` text: each column's MySQL type, nullability, default and ``auto_increment``,
the primary key, and every ``UNIQUE KEY``/``KEY``. :func:`index_statements` turns the keys into
SQLite indexes (so SQLite's planner sees the same access paths), :meth:`MySQLTable.describe`
gives ``DESC``'s rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^CREATE TABLE `([^`]+)`", re.IGNORECASE)
_COLUMN = re.compile(r"^`([^`]+)`\s+(\S+(?:\s+unsigned)?)(.*)$", re.IGNORECASE)
_KEY = re.compile(r"^(PRIMARY KEY|UNIQUE KEY\s+`[^`]*`|KEY\s+`[^`]*`)\s*\((.*)\)", re.IGNORECASE)
_KEY_NAME = re.compile(r"`([^`]*)`")
_DEFAULT = re.compile(r"DEFAULT\s+('(?:[^'\\]|\\.|'')*'|NULL|\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class MySQLColumn:
    """One column as MySQL declares it."""

    name: str
    type: str
    nullable: bool
    default: str | None
    auto_increment: bool
    default_generated: bool = False


@dataclass(frozen=True)
class MySQLIndex:
    """A key: ``kind`` is ``"primary"``, ``"unique"`` or ``"index"``."""

    name: str
    kind: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class MySQLTable:
    """A table's MySQL declaration (the dump's ``CREATE TABLE``)."""

    name: str
    columns: tuple[MySQLColumn, ...]
    indexes: tuple[MySQLIndex, ...]

    def key_of(self, column: str) -> str:
        """``DESC``'s Key: ``PRI``, ``UNI`` (first column of a unique key), ``MUL`` or ``''``."""
        low = column.lower()
        for index in self.indexes:
            if index.kind == "primary" and low in (c.lower() for c in index.columns):
                return "PRI"
        for kind, label in (("unique", "UNI"), ("index", "MUL")):
            for index in self.indexes:
                if index.kind == kind and index.columns[0].lower() == low:
                    if kind == "unique" and len(index.columns) > 1:
                        return "MUL"
                    return label
        return ""

    def describe(self) -> list[tuple[str, str, str, str, str | None, str]]:
        """``DESC`` rows: ``(Field, Type, Null, Key, Default, Extra)`` with str types."""
        rows = []
        for col in self.columns:
            key = self.key_of(col.name)
            null = "NO" if (not col.nullable or key == "PRI") else "YES"
            extra = "auto_increment" if col.auto_increment else ""
            if col.default_generated:  # an expression default, e.g. CURRENT_TIMESTAMP
                extra = "DEFAULT_GENERATED"
            rows.append((col.name, col.type, null, key, col.default, extra))
        return rows

    def indexed_first_columns(self) -> frozenset[str]:
        """Lower-cased columns that lead some index (MySQL can group or sort along them)."""
        return frozenset(index.columns[0].lower() for index in self.indexes if index.columns)


def parse_create_table(statement: str) -> MySQLTable | None:
    """The declaration in one mysqldump ``CREATE TABLE`` statement (``None``: not one)."""
    lines = statement.strip().splitlines()
    if not lines:
        return None
    head = _NAME.match(lines[0].strip())
    if head is None:
        return None
    columns: list[MySQLColumn] = []
    indexes: list[MySQLIndex] = []
    for raw in lines[1:]:
        line = raw.strip().rstrip(",")
        if line.startswith(")"):
            break
        key = _KEY.match(line)
        if key is not None:
            cols = tuple(_KEY_NAME.findall(key.group(2)))
            label = key.group(1)
            kind = (
                "primary"
                if label.upper().startswith("PRIMARY")
                else ("unique" if label.upper().startswith("UNIQUE") else "index")
            )
            names = _KEY_NAME.findall(label)
            indexes.append(MySQLIndex(names[0] if names else "PRIMARY", kind, cols))
            continue
        column = _COLUMN.match(line)
        if column is None:
            continue
        rest = column.group(3)
        default_match = _DEFAULT.search(rest)
        default: str | None = None
        if default_match is not None and default_match.group(1).upper() != "NULL":
            value = default_match.group(1)
            default = value[1:-1].replace("''", "'") if value.startswith("'") else value
        columns.append(
            MySQLColumn(
                name=column.group(1),
                type=column.group(2),
                nullable="NOT NULL" not in rest.upper(),
                default=default,
                auto_increment="AUTO_INCREMENT" in rest.upper(),
                default_generated=default is not None
                and default.upper().startswith(("CURRENT_TIMESTAMP", "NOW(")),
            )
        )
    return MySQLTable(head.group(1), tuple(columns), tuple(indexes))


def index_statements(table: MySQLTable) -> list[str]:
    """SQLite ``CREATE INDEX`` statements for the table's non-primary keys.

    The primary key needs none (an integer key is SQLite's rowid; a composite one gets its
    automatic index from the table definition), and unique keys already have one.
    """
    out = []
    quoted = table.name.replace('"', '""')
    for index in table.indexes:
        if index.kind != "index":
            continue
        name = f"mysql_{table.name}_{index.name}".replace('"', '""')
        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in index.columns)
        out.append(f'CREATE INDEX "{name}" ON "{quoted}" ({cols})')
    return out
