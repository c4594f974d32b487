"""How much SQL a statement expands to through the views and triggers it can reach.

Why this module exists: SQLite copies a view's whole query into every statement that reads it,
before it runs a single VM instruction, so neither the progress handler nor the authorizer sees
the work. An agent that creates views doubling one another (``v1`` reads ``v0`` twice, ``v2``
reads ``v1`` twice, ...) makes ``SELECT * FROM v14`` compile for seconds into gigabytes. We bound
the *expanded size* instead: a view weighs its own SQL text plus the weight of every view it
names; a statement weighs its text plus the views it names (and every trigger, which may run
with it). A view is "named" wherever its name appears as a word, inside string literals and
quotes too (``pragma_table_info('v')`` compiles ``v``), or, for a name that is not a plain
word (``"my view"``), wherever it appears as a substring. So the bound over-estimates (a column
or a string that happens to share a view's name counts) and never under-estimates.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

SATURATED = 1 << 62
"""Weights stop growing here (doubling views would otherwise make them astronomically large)."""

_WORD = re.compile(r"[A-Za-z_][\w$]*")


class SchemaWeights:
    """The expanded weight of statements on one database (views and triggers loaded lazily).

    Args:
        load: returns ``(type, name, sql)`` of every view and trigger (run by the connection
            with its policy off); called again after :meth:`invalidate`.
    """

    def __init__(self, load: Callable[[], list[tuple[str, str, str]]]) -> None:
        self._load = load
        self._views: dict[str, str] | None = None
        self._odd_names: list[str] = []  # view names that are not plain words
        self._weights: dict[str, int] = {}
        self._trigger_weight = 0

    def copy_from(self, other: SchemaWeights) -> None:
        """Take ``other``'s views and weights (a copy of its database has the same schema)."""
        if other._views is None:
            other._refresh()
        self._views = dict(other._views or {})
        self._odd_names = list(other._odd_names)
        self._weights = dict(other._weights)
        self._trigger_weight = other._trigger_weight

    def invalidate(self) -> None:
        """The schema may have changed (a view or trigger created, dropped or renamed)."""
        self._views = None

    def weigh(self, sql: str) -> int:
        """The expanded size of ``sql``: its length plus the views and triggers it can reach."""
        if self._views is None:
            self._refresh()
        if not self._views and not self._trigger_weight:
            return len(sql)
        total = len(sql) + self._trigger_weight
        for name, count in self._names(sql, None).items():
            total = min(total + count * self._view_weight(name), SATURATED)
        return total

    def _refresh(self) -> None:
        objects = self._load()
        views = {name.lower(): sql for kind, name, sql in objects if kind == "view"}
        self._views = views
        self._odd_names = [name for name in views if not _WORD.fullmatch(name)]
        self._weights = {}
        trigger_weight = 0
        for kind, _, sql in objects:
            if kind == "trigger":
                trigger_weight += len(sql)
                for name, count in self._names(sql, None).items():
                    trigger_weight = min(
                        trigger_weight + count * self._view_weight(name), SATURATED
                    )
        self._trigger_weight = trigger_weight

    def _names(self, sql: str, own: str | None) -> Counter[str]:
        """How often ``sql`` names each view (``own``, a view's own name, left out)."""
        views = self._views
        assert views is not None
        found: Counter[str] = Counter()
        for match in _WORD.finditer(sql):
            word = match.group(0).lower()
            if word in views and word != own:
                found[word] += 1
        if self._odd_names:
            lowered = sql.lower()
            for name in self._odd_names:
                if name != own and (count := lowered.count(name)):
                    found[name] += count
        return found

    def _view_weight(self, root: str) -> int:
        """Weight of view ``root``, memoised, computed without recursion (chains of thousands of
        views are legal). A view met again while its own weight is being computed weighs 0 there:
        SQLite refuses circular views, so such a cycle is only a word match."""
        views, weights = self._views, self._weights
        assert views is not None
        if root in weights:
            return weights[root]
        in_progress: set[str] = set()
        stack: list[tuple[str, Counter[str] | None]] = [(root, None)]
        while stack:
            name, deps = stack[-1]
            if deps is None:
                if name in weights or name in in_progress:
                    stack.pop()
                    continue
                in_progress.add(name)
                deps = self._names(views[name], name)
                stack[-1] = (name, deps)
                stack.extend((d, None) for d in deps if d not in weights and d not in in_progress)
                continue
            stack.pop()
            total = len(views[name])
            for dep, count in deps.items():
                total = min(total + count * weights.get(dep, 0), SATURATED)
            weights[name] = total
            in_progress.discard(name)
        return weights[root]
