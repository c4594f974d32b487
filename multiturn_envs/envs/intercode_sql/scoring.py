"""Scoring a query's result against the gold result: the ``intercode`` and ``exact`` modes.

Both modes compare *results* (rows a query returned), never SQL text, so any query that computes
the right answer scores 1.

``intercode`` reproduces InterCode-SQL's reward (``SqlEnv.get_reward``) exactly: rows become
``str(row)``, the multiset intersection over union of those strings is scaled by Kendall's tau-b
between the shared rows in the agent's order and in the gold order (scipy ranks the strings
lexicographically, so the tau pairs the i-th shared row of each list), rounded to 2 places; with
no tau (fewer than two shared rows, or all tied) the unrounded IoU is used; two empty results
score 1. The raw reward can be negative (a reversed order); the score the env reports is clipped
to [0, 1], the raw value is kept beside it.

``exact`` (the default) is a strict, type-normalised version of the Spider test-suite comparator
(``result_eq``): values are normalised (Decimal -> float, floats rounded to 3 places, integral
floats -> int, dates -> ISO text), the results must have the same number of columns and, up to a
permutation of the prediction's columns, the same multiset of rows; the row order must match
only when the gold query orders its outermost result (``ORDER BY``). Strings are compared as they
are (no case folding or trimming): the mode is strict by design.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import chain, groupby
from operator import itemgetter
from typing import Any, Literal

import numpy as np

ScoringMode = Literal["exact", "intercode"]
SCORING_MODES: tuple[str, ...] = ("exact", "intercode")

Row = tuple[Any, ...]

# Column permutations tried before the exact comparator gives up (Spider's comparator also
# bounds its search); results with many interchangeable columns are rare.
_MAX_PERMUTATIONS = 5_000


@dataclass(frozen=True)
class Scores:
    """Both scores of one result; ``intercode_raw`` is InterCode's unclipped reward."""

    exact: float
    intercode: float
    intercode_raw: float

    def get(self, mode: str) -> float:
        return self.exact if mode == "exact" else self.intercode


# ---------------------------------------------------------------------- InterCode's reward
def kendall_tau_b(x: Sequence[Any], y: Sequence[Any]) -> float:
    """Kendall's tau-b of paired sequences, as ``scipy.stats.kendalltau`` computes it.

    Values are replaced by their dense ranks (for strings: lexicographic order, as scipy's
    ``np.unique`` does), so any mutually comparable values work. ``nan`` when fewer than two
    pairs or when one side is constant. O(n log n): discordant pairs are counted as inversions
    with a merge sort.
    """
    n = len(x)
    if n != len(y):
        raise ValueError("x and y must have the same length")
    if n < 2:
        return math.nan
    xr = _dense_ranks(x)
    yr = _dense_ranks(y)
    order = np.lexsort((yr, xr))  # sort by x, then y: ties in x never count as inversions
    xs, ys = xr[order], yr[order]
    discordant = _count_inversions(ys.tolist())
    total = n * (n - 1) // 2
    x_ties = _tied_pairs(xs)
    y_ties = _tied_pairs(np.sort(ys))
    joint = np.r_[True, (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1]), True]
    counts = np.diff(np.flatnonzero(joint))
    joint_ties = int((counts * (counts - 1) // 2).sum())
    if x_ties == total or y_ties == total:
        return math.nan
    con_minus_dis = total - x_ties - y_ties + joint_ties - 2 * discordant
    tau = con_minus_dis / math.sqrt(total - x_ties) / math.sqrt(total - y_ties)
    return min(1.0, max(-1.0, tau))


def _dense_ranks(values: Sequence[Any]) -> np.ndarray:
    distinct = sorted(set(values))
    rank = {v: i for i, v in enumerate(distinct)}
    return np.fromiter((rank[v] for v in values), dtype=np.int64, count=len(values))


def _tied_pairs(sorted_values: np.ndarray) -> int:
    edges = np.r_[True, sorted_values[1:] != sorted_values[:-1], True]
    counts = np.diff(np.flatnonzero(edges))
    return int((counts * (counts - 1) // 2).sum())


def _count_inversions(values: list[int]) -> int:
    """Pairs i < j with values[i] > values[j] (strictly), by bottom-up merge sort."""
    n = len(values)
    src = list(values)
    inversions = 0
    width = 1
    while width < n:
        dst: list[int] = []
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            while i < mid and j < hi:
                if src[j] < src[i]:
                    dst.append(src[j])
                    inversions += mid - i
                    j += 1
                else:
                    dst.append(src[i])
                    i += 1
            dst.extend(src[i:mid])
            dst.extend(src[j:hi])
        src = dst
        width *= 2
    return inversions


def _shared_in_order(items: list[str], shared: Counter[str]) -> list[str]:
    """InterCode's ``get_intersect_items``: the shared items, in ``items``' order."""
    budget = Counter(shared)
    out = []
    for item in items:
        if budget.get(item, 0) > 0:
            budget[item] -= 1
            out.append(item)
    return out


def intercode_reward(
    agent_rows: Sequence[Row] | None, gold_rows: Sequence[Row], *, order_weighted: bool = True
) -> float:
    """InterCode-SQL's reward, unclipped: ``None`` (no result set, an error) scores 0.0.

    ``order_weighted=False`` gives the IoU alone, without the Kendall-tau factor: the reward of
    an earlier InterCode version, which scored part of its published runs (see the env card).
    """
    if agent_rows is None:
        return 0.0
    agent = [str(tuple(r)) for r in agent_rows]
    gold = [str(tuple(r)) for r in gold_rows]
    dist_agent, dist_gold = Counter(agent), Counter(gold)
    intersection = dist_agent & dist_gold
    merged = sorted(chain(dist_agent.items(), dist_gold.items()), key=itemgetter(0))
    union = {k: max(v for _, v in g) for k, g in groupby(merged, key=itemgetter(0))}
    if not union:
        return 1.0
    reward = sum(intersection.values()) / sum(union.values())
    if intersection and order_weighted:
        tau = kendall_tau_b(
            _shared_in_order(agent, intersection), _shared_in_order(gold, intersection)
        )
        if not math.isnan(tau):
            reward = round(tau * reward, 2)
    return float(reward)


# ---------------------------------------------------------------------- exact comparison
def normalize_value(value: Any) -> Any:
    """The exact mode's value normalisation (strict: text is left as it is)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return value
        value = round(value, 3)
        return int(value) if value.is_integer() else value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def normalize_rows(rows: Sequence[Row]) -> list[Row]:
    return [tuple(normalize_value(v) for v in row) for row in rows]


def _column_permutations(pred: list[Row], gold: list[Row], width: int) -> Iterator[tuple[int, ...]]:
    """Permutations p (gold column j <- pred column p[j]) whose columns hold equal multisets."""
    pred_cols = [Counter(row[i] for row in pred) for i in range(width)]
    gold_cols = [Counter(row[j] for row in gold) for j in range(width)]
    candidates = [[i for i in range(width) if pred_cols[i] == gold_cols[j]] for j in range(width)]
    if any(not c for c in candidates):
        return
    chosen: list[int] = []
    used: set[int] = set()

    def extend(j: int) -> Iterator[tuple[int, ...]]:
        if j == width:
            yield tuple(chosen)
            return
        for i in candidates[j]:
            if i not in used:
                used.add(i)
                chosen.append(i)
                yield from extend(j + 1)
                chosen.pop()
                used.discard(i)

    yield from extend(0)


def exact_match(
    pred_rows: Sequence[Row] | None,
    gold_rows: Sequence[Row],
    *,
    order_matters: bool,
    pred_width: int | None = None,
    gold_width: int | None = None,
) -> bool:
    """Spider-style result equality on normalised values (see the module docstring).

    ``pred_width``/``gold_width`` are the column counts (needed for empty results; taken from
    the first row otherwise).
    """
    if pred_rows is None:
        return False
    pred, gold = normalize_rows(pred_rows), normalize_rows(gold_rows)
    if len(pred) != len(gold):
        return False
    pw = pred_width if pred_width is not None else (len(pred[0]) if pred else 0)
    gw = gold_width if gold_width is not None else (len(gold[0]) if gold else 0)
    if pw != gw:
        return False
    if not gold:
        return True
    gold_counts = Counter(gold) if not order_matters else None
    for n_tried, perm in enumerate(_column_permutations(pred, gold, gw)):
        if n_tried >= _MAX_PERMUTATIONS:
            return False
        permuted = [tuple(row[i] for i in perm) for row in pred]
        if order_matters:
            if permuted == gold:
                return True
        elif Counter(permuted) == gold_counts:
            return True
    return False


_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def outer_query_orders(sql: str, parse: Callable[[str], Any] | None = None) -> bool:
    """Whether the outermost query of ``sql`` has an ORDER BY (then row order is graded).

    Uses sqlglot when it parses the query; otherwise falls back to "ORDER BY appears at
    parenthesis depth 0" on the text.
    """
    try:
        import sqlglot

        tree = (parse or (lambda s: sqlglot.parse_one(s, read="sqlite")))(sql)
        return tree is not None and tree.args.get("order") is not None
    except Exception:
        depth = 0
        masked = []
        for ch in sql:
            depth += ch == "("
            masked.append(ch if depth == 0 else " ")
            depth -= ch == ")"
        return bool(_ORDER_BY.search("".join(masked)))


def score_result(
    pred_rows: Sequence[Row] | None,
    gold_rows: Sequence[Row],
    *,
    order_matters: bool,
    pred_width: int | None = None,
    gold_width: int | None = None,
) -> Scores:
    """Both modes' scores of a result (``None``: the query failed or returned no result set)."""
    raw = intercode_reward(pred_rows, gold_rows)
    exact = exact_match(
        pred_rows,
        gold_rows,
        order_matters=order_matters,
        pred_width=pred_width,
        gold_width=gold_width,
    )
    return Scores(exact=1.0 if exact else 0.0, intercode=min(1.0, max(0.0, raw)), intercode_raw=raw)
