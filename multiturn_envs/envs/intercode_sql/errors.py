"""Plausible wrong queries derived from the gold one (the env's ``error_action``).

An injected error should look like a mistake an agent makes, not noise: the gold query with one
edit, the kinds Spider error analyses report most (wrong column, dropped or flipped condition,
wrong aggregate, wrong join key, lost DISTINCT/ORDER/LIMIT/HAVING, IN <-> NOT IN). Candidates are
made with sqlglot edits of the gold's tree; the env keeps only those that run and score below 1
at the current state, so an error never ends the episode and is never secretly right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

_AGG_SWAPS: Mapping[str, tuple[str, ...]] = {
    "Count": ("Sum", "Max"),
    "Sum": ("Avg", "Max", "Count"),
    "Avg": ("Sum", "Max", "Min"),
    "Max": ("Min", "Avg"),
    "Min": ("Max", "Avg"),
}
_FLIPS: Mapping[str, str] = {
    "GT": "LT",
    "LT": "GT",
    "GTE": "LTE",
    "LTE": "GTE",
    "EQ": "NEQ",
    "NEQ": "EQ",
}


def gold_mutations(gold: str, schema: Mapping[str, Sequence[str]]) -> list[str]:
    """Distinct one-edit variants of ``gold`` (SQLite dialect), in a deterministic order.

    ``schema`` maps table names (any case) to their column names, for wrong-column edits.
    """
    try:
        import sqlglot
        from sqlglot import exp

        original = sqlglot.parse_one(gold, read="sqlite")
    except Exception:
        return []
    lower_schema = {t.lower(): list(cols) for t, cols in schema.items()}
    tables = [t.name.lower() for t in original.find_all(exp.Table)]
    pool = [c for t in tables for c in lower_schema.get(t, [])]

    out: list[str] = []
    seen = {gold.strip()}

    def emit(edit: Callable[[Any], bool]) -> None:
        tree = original.copy()
        try:
            if not edit(tree):
                return
            sql = tree.sql(dialect="sqlite")
        except Exception:
            return
        if sql not in seen:
            seen.add(sql)
            out.append(sql)

    def nth(
        kind: type[exp.Expression], i: int
    ) -> Callable[[exp.Expression], exp.Expression | None]:
        def find(tree: exp.Expression) -> exp.Expression | None:
            nodes = list(tree.find_all(kind))
            return nodes[i] if i < len(nodes) else None

        return find

    # wrong column in the outermost projection
    select = original if isinstance(original, exp.Select) else original.find(exp.Select)
    n_proj_cols = sum(
        1 for p in (select.expressions if select else []) for _ in p.find_all(exp.Column)
    )
    for i in range(n_proj_cols):
        for replacement in pool[:12]:

            def wrong_column(tree: exp.Expression, i: int = i, new: str = replacement) -> bool:
                sel = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
                if sel is None:
                    return False
                cols = [c for p in sel.expressions for c in p.find_all(exp.Column)]
                if i >= len(cols) or cols[i].name.lower() == new.lower():
                    return False
                cols[i].set("this", exp.to_identifier(new))
                return True

            emit(wrong_column)
    # dropped condition: the whole WHERE, or one conjunct
    for i in range(len(list(original.find_all(exp.Where)))):

        def drop_where(tree: exp.Expression, i: int = i) -> bool:
            node = nth(exp.Where, i)(tree)
            if node is None:
                return False
            node.pop()
            return True

        emit(drop_where)
    for i in range(len(list(original.find_all(exp.And)))):
        for side in ("this", "expression"):

            def drop_conjunct(tree: exp.Expression, i: int = i, side: str = side) -> bool:
                node = nth(exp.And, i)(tree)
                if node is None:
                    return False
                keep = node.expression if side == "this" else node.this
                node.replace(keep)
                return True

            emit(drop_conjunct)
    # flipped comparison
    for name, flipped in _FLIPS.items():
        kind = getattr(exp, name)
        for i in range(len(list(original.find_all(kind)))):

            def flip(
                tree: exp.Expression, i: int = i, kind: type = kind, to: str = flipped
            ) -> bool:
                node = nth(kind, i)(tree)
                if node is None:
                    return False
                node.replace(getattr(exp, to)(this=node.this, expression=node.expression))
                return True

            emit(flip)
    # wrong aggregate
    for name, swaps in _AGG_SWAPS.items():
        kind = getattr(exp, name)
        for i in range(len(list(original.find_all(kind)))):
            for to in swaps:

                def swap_agg(
                    tree: exp.Expression, i: int = i, kind: type = kind, to: str = to
                ) -> bool:
                    node = nth(kind, i)(tree)
                    if node is None or (isinstance(node.this, exp.Star) and to != "Count"):
                        return False
                    arg = node.this
                    if isinstance(arg, exp.Distinct):
                        arg = arg.expressions[0] if arg.expressions else arg
                    node.replace(getattr(exp, to)(this=arg))
                    return True

                emit(swap_agg)
    # wrong join key
    for i in range(len(list(original.find_all(exp.Join)))):
        for replacement in pool[:12]:

            def wrong_key(tree: exp.Expression, i: int = i, new: str = replacement) -> bool:
                join = nth(exp.Join, i)(tree)
                on = join.args.get("on") if join is not None else None
                col = on.find(exp.Column) if on is not None else None
                if col is None or col.name.lower() == new.lower():
                    return False
                col.set("this", exp.to_identifier(new))
                return True

            emit(wrong_key)
    # lost DISTINCT / HAVING / ORDER BY direction / LIMIT, IN <-> NOT IN

    def drop_distinct(tree: exp.Expression) -> bool:
        node = tree.find(exp.Distinct)
        if node is None or not isinstance(node.parent, exp.Select):
            return False
        node.pop()
        return True

    def drop_having(tree: exp.Expression) -> bool:
        node = tree.find(exp.Having)
        if node is None:
            return False
        node.pop()
        return True

    def flip_order(tree: exp.Expression) -> bool:
        node = tree.find(exp.Ordered)
        if node is None:
            return False
        node.set("desc", not node.args.get("desc"))
        return True

    def widen_limit(tree: exp.Expression) -> bool:
        node = tree.args.get("limit")
        if node is None:
            return False
        tree.set("limit", None)
        return True

    def negate_in(tree: exp.Expression) -> bool:
        node = tree.find(exp.In)
        if node is None:
            return False
        if isinstance(node.parent, exp.Not):
            node.parent.replace(node)
        else:
            node.replace(exp.Not(this=node.copy()))
        return True

    for edit in (drop_distinct, drop_having, flip_order, widen_limit, negate_in):
        emit(edit)
    return out
