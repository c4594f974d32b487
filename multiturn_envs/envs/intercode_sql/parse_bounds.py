"""How large a query the MySQL emulation hands to sqlglot.

sqlglot is pure Python and recursive, and its cost grows faster than the query: a 10,000-deep
``1/1/1/...`` took ~40 s and 1.3 GB, and even 300 chained divisions take most of a second
(each division becomes ``CAST(... AS REAL)`` around the whole chain so far). The emulation
(MySQL's exact division, MySQL's row order, the MySQL-to-SQLite rewrite, the clause of an
unknown column, ``mysql_strict``) therefore parses only queries within these bounds; a larger
query runs with SQLite's own semantics, and the observation says so. Spider's golds and the
queries of InterCode's published runs are far inside them (the longest gold has 565
characters).
"""

from __future__ import annotations

MAX_PARSE_CHARS = 5_000
"""Characters of a query sqlglot may parse."""
MAX_NESTING = 64
"""Parenthesis depth of a query sqlglot may parse."""
MAX_DIVISIONS = 32
"""``/`` characters (divisions, or slashes in literals and comments) of such a query."""


def parse_bound_problem(sql: str) -> str | None:
    """Why sqlglot may not be given ``sql`` (``None`` when it may). Cheap: counts first."""
    if len(sql) > MAX_PARSE_CHARS:
        return f"it is longer than {MAX_PARSE_CHARS:,} characters"
    if sql.count("/") > MAX_DIVISIONS:
        return f"it has more than {MAX_DIVISIONS} divisions"
    if sql.count("(") > MAX_NESTING:
        depth = deepest = 0
        for char in sql:
            if char == "(":
                depth += 1
                deepest = max(deepest, depth)
            elif char == ")":
                depth -= 1
        if deepest > MAX_NESTING:
            return f"it nests parentheses more than {MAX_NESTING} deep"
    return None
