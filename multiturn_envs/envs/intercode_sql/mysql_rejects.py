"""Queries SQLite runs but MySQL 8 refuses, and why.

Spider's gold queries were written for SQLite. InterCode ran them on MySQL 8, where a few fail,
and InterCode's reward then silently treats the failed gold as an empty result (``[]``): on
such a task the right answer scores 0 there and any empty result scores 1. We keep the gold
working (a broken task must not reward an empty query) and name the cause instead, so the
difference is counted, not hidden. The checks, in MySQL's words:

* ``ONLY_FULL_GROUP_BY`` (on by default in MySQL 8): a selected column that is neither grouped,
  nor aggregated, nor functionally dependent on the grouped columns (through a primary key,
  also across ``=`` join conditions), and a bare column in an aggregated query without
  ``GROUP BY``;
* a derived table without an alias (``FROM (SELECT ...)``);
* a table named after a reserved word (``FROM SHOW``);
* a space between an aggregate's name and its parenthesis (``COUNT (*)``: without
  ``IGNORE_SPACE`` MySQL does not read it as the function);
* ``LIMIT`` inside an ``IN (SELECT ...)`` subquery;
* SQLite's postfix ``x NOT NULL`` (MySQL knows only ``x IS NOT NULL``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from multiturn_envs.envs.intercode_sql.mysql_schema import MySQLTable
from multiturn_envs.envs.intercode_sql.parse_bounds import parse_bound_problem

RESERVED_TABLE_NAMES: frozenset[str] = frozenset(
    {"show", "select", "order", "group", "table", "desc", "where", "from", "key", "index"}
)
_AGGREGATES = ("Count", "Sum", "Avg", "Min", "Max", "GroupConcat")
_SPACED_AGGREGATE = re.compile(r"\b(?:count|sum|avg|min|max)\s+\(\s*(.{0,80})", re.IGNORECASE)
# (?<!\s): a match starts at the first blank of a run (otherwise every blank of a long run
# re-scans the run: quadratic)
_POSTFIX_NOT_NULL = re.compile(r"(?<!\s)(?<!\bis)(?<!\bIS)\s+not\s+null\b(.{0,80})", re.IGNORECASE)
_CANDIDATE = re.compile(
    r"\bnot\s+null\b|\b(?:count|sum|avg|min|max|group_concat)\s*\(|\bgroup\s+by\b|\(\s*select\b|"
    rf"\b(?:from|join)\s+(?:{'|'.join(sorted(RESERVED_TABLE_NAMES))})\b",
    re.IGNORECASE,
)


def might_be_rejected(sql: str) -> bool:
    """Cheap pre-check before :func:`mysql_rejects` parses ``sql`` (queries only)."""
    is_query = sql.lstrip("( \n\t\r").upper().startswith(("SELECT", "WITH"))
    return is_query and _CANDIDATE.search(sql) is not None


def _inside_aggregate(node: Any) -> bool:
    from sqlglot import exp

    kinds = tuple(getattr(exp, name) for name in _AGGREGATES)
    parent = node.parent
    while parent is not None:
        if isinstance(parent, kinds):
            return True
        if isinstance(parent, exp.Select):
            return False
        parent = parent.parent
    return False


def _equalities(select: Any) -> list[tuple[Any, Any]]:
    from sqlglot import exp

    pairs = []
    conditions = [select.args.get("where")] + [
        join.args.get("on") for join in select.args.get("joins") or []
    ]
    for condition in conditions:
        if condition is None:
            continue
        for eq in condition.find_all(exp.EQ):
            if isinstance(eq.this, exp.Column) and isinstance(eq.expression, exp.Column):
                pairs.append((eq.this, eq.expression))
    return pairs


def _full_group_by_violation(select: Any, tables: Mapping[str, MySQLTable], db: str) -> str | None:
    from sqlglot import exp

    from_ = select.args.get("from") or select.args.get("from_")
    if from_ is None:
        return None
    sources = [from_.this] + [j.this for j in select.args.get("joins") or []]
    if not all(isinstance(s, exp.Table) for s in sources):
        return None
    by_ref = {s.alias_or_name.lower(): s.name.lower() for s in sources}

    def resolve(column: Any) -> tuple[str, str] | None:
        name = column.name.lower()
        if column.table:
            table = by_ref.get(column.table.lower())
            return (column.table.lower(), name) if table else None
        owners = [
            ref
            for ref, table in by_ref.items()
            if table in tables and name in (c.name.lower() for c in tables[table].columns)
        ]
        return (owners[0], name) if len(owners) == 1 else None

    kinds = tuple(getattr(exp, name) for name in _AGGREGATES)
    group = select.args.get("group")
    bare = [
        col
        for projection in select.expressions
        for col in projection.find_all(exp.Column)
        if col.find_ancestor(exp.Select) is select and not _inside_aggregate(col)
    ]
    if group is None or not group.expressions:
        own = [a for a in select.find_all(*kinds) if a.find_ancestor(exp.Select) is select]
        if not own or not bare:
            return None
        position = next(
            i for i, p in enumerate(select.expressions, 1) if bare[0] in set(p.find_all(exp.Column))
        )
        owner = resolve(bare[0])
        table = by_ref.get(owner[0], owner[0]) if owner else ""
        real = tables[table].name if table in tables else table
        return (
            f"In aggregated query without GROUP BY, expression #{position} of SELECT list "
            f"contains nonaggregated column '{db}.{real}.{bare[0].name}'; this is incompatible "
            "with sql_mode=only_full_group_by"
        )
    known: set[tuple[str, str]] = set()
    for key in group.expressions:
        if isinstance(key, exp.Column) and (resolved := resolve(key)) is not None:
            known.add(resolved)
    determined: set[str] = set()
    equalities = [(resolve(a), resolve(b)) for a, b in _equalities(select)]
    changed = True
    while changed:
        changed = False
        for a, b in equalities:
            if a is not None and b is not None and (a in known) != (b in known):
                known.update((a, b))
                changed = True
        for ref, table in by_ref.items():
            declared = tables.get(table)
            if ref in determined or declared is None:
                continue
            primary = [i for i in declared.indexes if i.kind in ("primary", "unique")]
            if any(all((ref, c.lower()) in known for c in index.columns) for index in primary):
                determined.add(ref)
                known.update((ref, c.name.lower()) for c in declared.columns)
                changed = True
    for i, projection in enumerate(select.expressions, 1):
        for col in projection.find_all(exp.Column):
            if col.find_ancestor(exp.Select) is not select or _inside_aggregate(col):
                continue
            resolved = resolve(col)
            if resolved is None or resolved in known:
                continue
            table = by_ref.get(resolved[0], resolved[0])
            real = tables[table].name if table in tables else table
            return (
                f"Expression #{i} of SELECT list is not in GROUP BY clause and contains "
                f"nonaggregated column '{db}.{real}.{col.name}' which is not functionally "
                "dependent on columns in GROUP BY clause; this is incompatible with "
                "sql_mode=only_full_group_by"
            )
    return None


def mysql_rejects(sql: str, tables: Mapping[str, MySQLTable], db: str) -> str | None:
    """MySQL 8's error for ``sql`` where SQLite accepts it (``None``: no known rejection).

    ``tables`` are the database's MySQL declarations (keys decide functional dependence).
    """
    masked = re.sub(r"'(?:[^']|'')*'", "''", sql)
    syntax = (
        "You have an error in your SQL syntax; check the manual that corresponds to your MySQL "
        "server version for the right syntax to use near '{}' at line 1"
    )
    if (m := _SPACED_AGGREGATE.search(masked)) is not None:
        return syntax.format(m.group(1).strip())
    if (
        not masked.lstrip().upper().startswith(("CREATE", "ALTER"))
        and (m := _POSTFIX_NOT_NULL.search(masked)) is not None
    ):
        return syntax.format(("NULL" + m.group(1)).strip())
    if parse_bound_problem(sql) is not None:
        return None
    try:
        import sqlglot
        from sqlglot import exp

        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:
        return None
    for table in tree.find_all(exp.Table):
        if table.name.lower() in RESERVED_TABLE_NAMES and not table.this.quoted:
            return (
                "You have an error in your SQL syntax; check the manual that corresponds to "
                f"your MySQL server version for the right syntax to use near '{table.name}'"
            )
    for subquery in tree.find_all(exp.Subquery):
        if isinstance(subquery.parent, exp.From | exp.Join) and not subquery.alias:
            return "Every derived table must have its own alias"
    for in_ in tree.find_all(exp.In):
        query = in_.args.get("query")
        if query is not None and any(True for _ in query.find_all(exp.Limit)):
            return "This version of MySQL doesn't yet support 'LIMIT & IN/ALL/ANY/SOME subquery'"
    for select in tree.find_all(exp.Select):
        reason = _full_group_by_violation(select, tables, db)
        if reason is not None:
            return reason
    return None
