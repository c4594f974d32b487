"""MySQL 8's row order on SQLite, where SQL leaves the order open.

InterCode's reward grades row order even without ``ORDER BY`` (Kendall's tau between the agent's
rows and the gold's), so the order an engine happens to produce changes rewards. MySQL 8
(InnoDB) and SQLite differ in three places that matter on Spider, measured on InterCode's
published runs (see the env card):

* ``GROUP BY`` without an index on the key: MySQL 8 aggregates in a temporary table and returns
  the groups in order of first appearance in its scan; SQLite sorts by the key. With an index
  on the key (or a ``COUNT(DISTINCT ...)``, which MySQL groups by sorting) both come out in key
  order.
* Ties under ``ORDER BY``: MySQL's sort keeps the input order of equal rows (so ``ORDER BY
  count(*) DESC LIMIT 1`` picks the first group in the order above); SQLite's sorter returns
  ties in another order.
* ``UNION``/``INTERSECT``/``EXCEPT``: MySQL de-duplicates through a temporary table and keeps the
  first appearance order of the left input; SQLite sorts.

:func:`order_like_mysql` rewrites a SELECT so SQLite produces MySQL's order (tie-breakers
appended to ``ORDER BY``: the group's first scan position, ``MIN(rowid)``, or the group key);
:func:`run_set_operation` evaluates a top-level set operation branch by branch and combines the
rows as MySQL does, comparing text as ``utf8mb4_general_ci`` (case- and trailing-space-blind).
Both leave anything they cannot handle to SQLite unchanged (``None``). Joins are taken in
``FROM`` order; MySQL's optimizer may pick another join order, so a grouped join can still
differ (counted in the env card).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from multiturn_envs.envs.intercode_sql.database import QueryResult, Row
from multiturn_envs.envs.intercode_sql.functions import mysql_text_key
from multiturn_envs.envs.intercode_sql.parse_bounds import parse_bound_problem

_NEEDS_ORDER = re.compile(r"\b(group\s+by|order\s+by|union|intersect|except)\b", re.IGNORECASE)
_AGGREGATES = ("Count", "Sum", "Avg", "Min", "Max", "GroupConcat")


def needs_mysql_order(sql: str) -> bool:
    """Cheap pre-check: could :func:`order_like_mysql` or :func:`run_set_operation` apply?"""
    return is_query(sql) and _NEEDS_ORDER.search(sql) is not None


def is_query(sql: str) -> bool:
    """Whether ``sql`` starts as a query (``SELECT``/``WITH``/``VALUES``, maybe parenthesised)."""
    return sql.lstrip("( \n\t\r").upper().startswith(("SELECT", "WITH", "VALUES"))


def _parse(sql: str) -> Any:
    if parse_bound_problem(sql) is not None:
        return None
    import sqlglot
    from sqlglot.errors import ErrorLevel

    trees = sqlglot.parse(sql, read="sqlite", error_level=ErrorLevel.RAISE)
    if len(trees) != 1 or trees[0] is None:
        return None
    return trees[0]


def _sources(select: Any) -> list[tuple[str, str]] | None:
    """``(reference, table name)`` of each source in FROM order; ``None`` unless all are tables."""
    from sqlglot import exp

    from_ = select.args.get("from") or select.args.get("from_")
    if from_ is None:
        return None
    nodes = [from_.this] + [join.this for join in select.args.get("joins") or []]
    out = []
    for node in nodes:
        if not isinstance(node, exp.Table) or not node.name:
            return None
        out.append((node.alias_or_name, node.name))
    return out


def _has_aggregate(node: Any) -> bool:
    from sqlglot import exp

    kinds = tuple(getattr(exp, name) for name in _AGGREGATES)
    return any(True for _ in node.find_all(*kinds))


def _distinct_aggregate(select: Any) -> bool:
    from sqlglot import exp

    kinds = tuple(getattr(exp, name) for name in _AGGREGATES)
    return any(isinstance(agg.this, exp.Distinct) for agg in select.find_all(*kinds))


def _group_key_indexed(
    select: Any,
    sources: list[tuple[str, str]],
    indexed: Mapping[str, frozenset[str]],
) -> bool:
    """Whether the single GROUP BY key is a column that leads a MySQL index of its table."""
    from sqlglot import exp

    keys = select.args["group"].expressions
    if len(keys) != 1 or not isinstance(keys[0], exp.Column):
        return False
    column = keys[0]
    name = column.name.lower()
    by_ref = {ref.lower(): table.lower() for ref, table in sources}
    if column.table:
        table = by_ref.get(column.table.lower())
        return table is not None and name in indexed.get(table, frozenset())
    return any(name in indexed.get(table.lower(), frozenset()) for _, table in sources)


def order_like_mysql(sql: str, indexed: Mapping[str, frozenset[str]]) -> str | None:
    """``sql`` with ORDER BY tie-breakers that give MySQL 8's row order, or ``None``.

    ``indexed`` maps lower-cased table names to the lower-cased columns that lead one of their
    MySQL indexes (primary, unique or plain keys).
    """
    from sqlglot import exp

    try:
        tree = _parse(sql)
    except Exception:
        return None
    if not isinstance(tree, exp.Select):
        return None
    sources = _sources(tree)
    if not sources:
        return None
    refs = [exp.column("rowid", table=ref) for ref, _ in sources]
    if len(refs) == 1:
        position: Any = refs[0]
    else:
        parts = [exp.func("printf", exp.Literal.string("%010d"), ref) for ref in refs]
        position = parts[0]
        for part in parts[1:]:
            position = exp.DPipe(this=position, expression=part)
    order = tree.args.get("order")
    terms = list(order.expressions) if order is not None else []
    group = tree.args.get("group")
    if group is not None and group.expressions:
        if _distinct_aggregate(tree) or _group_key_indexed(tree, sources, indexed):
            if order is None:
                return None  # SQLite already returns groups in key order
            extra = [exp.Ordered(this=key.copy()) for key in group.expressions]
        else:
            extra = [exp.Ordered(this=exp.Min(this=position))]
    elif _has_aggregate(tree) or order is None or tree.args.get("distinct") is not None:
        return None
    else:
        extra = [exp.Ordered(this=position)]
    tree.set("order", exp.Order(expressions=terms + extra))
    try:
        return str(tree.sql(dialect="sqlite"))
    except Exception:
        return None


def _dedup_key(row: Row) -> tuple[Any, ...]:
    return tuple(mysql_text_key(v) if isinstance(v, str) else v for v in row)


def _unique(rows: Sequence[Row]) -> list[Row]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for row in rows:
        key = _dedup_key(row)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def run_set_operation(sql: str, execute: Callable[[str], QueryResult]) -> QueryResult | None:
    """A top-level ``UNION``/``INTERSECT``/``EXCEPT`` evaluated with MySQL's row order.

    Each branch runs through ``execute``; ``None`` when ``sql`` is not such an operation, has its
    own ORDER BY/LIMIT, or any branch fails (the caller then runs ``sql`` on SQLite as it is).
    """
    from sqlglot import exp

    try:
        tree = _parse(sql)
    except Exception:
        return None
    if not isinstance(tree, exp.Union | exp.Intersect | exp.Except):
        return None
    if tree.args.get("order") is not None or tree.args.get("limit") is not None:
        return None

    def evaluate(node: Any) -> QueryResult | None:
        if isinstance(node, exp.Subquery):
            node = node.this
        if isinstance(node, exp.Union | exp.Intersect | exp.Except):
            if node.args.get("order") is not None or node.args.get("limit") is not None:
                return None
            left, right = evaluate(node.left), evaluate(node.right)
            if left is None or right is None or left.rows is None or right.rows is None:
                return None
            if len(left.columns) != len(right.columns):
                return None
            distinct = node.args.get("distinct") is not False
            if isinstance(node, exp.Union):
                rows = left.rows + right.rows
                rows = _unique(rows) if distinct else rows
            else:
                right_keys = {_dedup_key(r) for r in right.rows}
                keep = isinstance(node, exp.Intersect)
                base = _unique(left.rows) if distinct else left.rows
                rows = [r for r in base if (_dedup_key(r) in right_keys) == keep]
            return QueryResult(columns=left.columns, rows=rows, total_rows=len(rows))
        if not isinstance(node, exp.Select):
            return None
        try:
            text = node.sql(dialect="sqlite")
        except Exception:
            return None
        result = execute(text)
        return result if result.ok and result.rows is not None else None

    return evaluate(tree)
