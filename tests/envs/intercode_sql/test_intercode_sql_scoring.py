"""The two scorers against InterCode's reward table, brute-force definitions and scipy."""

from __future__ import annotations

import importlib.util
import itertools
import math
from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.intercode_sql.scoring import (
    exact_match,
    intercode_reward,
    kendall_tau_b,
    normalize_rows,
    outer_query_orders,
    score_result,
)
from multiturn_envs.testing import require

GOLD = [(1,), (2,), (3,), (4,)]


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        (GOLD, 1.0),
        (GOLD[::-1], -1.0),
        ([(1,), (3,), (2,), (4,)], 0.67),
        (GOLD[:2], 0.5),
        (GOLD + GOLD, 0.5),
        ([*GOLD, (5,), (6,)], 0.67),
        ([(1,), (9,)], 0.2),
        ([(7,)], 0.0),
        ([(1.0,), (2.0,), (3.0,), (4.0,)], 0.0),
        ([(r[0], 0) for r in GOLD], 0.0),
    ],
)
def test_intercode_reward_reproduces_the_field_note_table(agent: list, expected: float) -> None:
    assert intercode_reward(agent, GOLD) == pytest.approx(expected)


def test_intercode_quirks() -> None:
    assert intercode_reward([], []) == 1.0  # empty vs empty
    assert intercode_reward(None, GOLD) == 0.0  # error / no result set
    # tau pairs the i-th shared row strings: a perfect set can score 0
    assert intercode_reward([(3,), (1,), (2,), (4,)], [(2,), (4,), (1,), (3,)]) == 0.0
    # one shared row: no tau, unrounded IoU
    assert intercode_reward([(1,), (8,), (9,)], [(1,), (5,)]) == pytest.approx(1 / 4)


def _brute_tau_b(x: list, y: list) -> float:
    n = len(x)
    if n < 2:
        return math.nan
    conc = disc = tx = ty = 0
    for i, j in itertools.combinations(range(n), 2):
        dx = (x[i] > x[j]) - (x[i] < x[j])
        dy = (y[i] > y[j]) - (y[i] < y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx == dy:
            conc += 1
        else:
            disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return math.nan if denom == 0 else (conc - disc) / denom


small_lists = st.integers(0, 12).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 4), min_size=n, max_size=n),
        st.lists(st.integers(0, 4), min_size=n, max_size=n),
    )
)


@given(small_lists)
def test_tau_b_matches_its_brute_force_definition(pair: tuple[list, list]) -> None:
    x, y = pair
    ours, brute = kendall_tau_b(x, y), _brute_tau_b(x, y)
    assert (math.isnan(ours) and math.isnan(brute)) or ours == pytest.approx(brute, abs=1e-12)


@given(small_lists)
@settings(max_examples=40)
def test_tau_b_matches_scipy(pair: tuple[list, list]) -> None:
    require(importlib.util.find_spec("scipy") is not None, "scipy (the reference kendalltau)")
    import scipy.stats as stats

    x, y = pair
    ours = kendall_tau_b([str(v) for v in x], [str(v) for v in y])
    theirs = (
        stats.kendalltau([str(v) for v in x], [str(v) for v in y]).statistic
        if len(x) > 1
        else math.nan
    )
    assert (math.isnan(ours) and math.isnan(theirs)) or ours == pytest.approx(theirs, abs=1e-12)


values = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", "A"]), st.none())
rows = st.integers(1, 3).flatmap(lambda w: st.lists(st.tuples(*[values] * w), max_size=6))


def _brute_iou(agent: list, gold: list) -> float:
    a, g = Counter(map(str, agent)), Counter(map(str, gold))
    keys = set(a) | set(g)
    union = sum(max(a[k], g[k]) for k in keys)
    inter = sum(min(a[k], g[k]) for k in keys)
    return 1.0 if union == 0 else inter / union


@given(rows, rows)
def test_intercode_reward_is_iou_scaled_by_a_bounded_factor(agent: list, gold: list) -> None:
    reward = intercode_reward(agent, gold)
    iou = _brute_iou(agent, gold)
    assert -1.0 <= reward <= 1.0
    assert abs(reward) <= iou + 0.005  # |tau| <= 1, rounding to 2 places
    if reward == 1.0:
        assert Counter(map(str, agent)) == Counter(map(str, gold))
    scores = score_result(agent, gold, order_matters=False)
    assert 0.0 <= scores.intercode <= 1.0 and scores.exact in (0.0, 1.0)


def _brute_exact(pred: list, gold: list, order: bool, width: int) -> bool:
    p, g = normalize_rows(pred), normalize_rows(gold)
    if len(p) != len(g):
        return False
    for perm in itertools.permutations(range(width)):
        permuted = [tuple(r[i] for i in perm) for r in p]
        if (permuted == g) if order else (Counter(permuted) == Counter(g)):
            return True
    return False


@given(
    st.integers(1, 3).flatmap(
        lambda w: st.tuples(st.just(w), *[st.lists(st.tuples(*[values] * w), max_size=5)] * 2)
    ),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_exact_match_equals_brute_force_over_column_permutations(
    case: tuple, order: bool, rnd
) -> None:
    width, pred, gold = case
    if rnd.random() < 0.5:  # often compare a shuffled, column-permuted copy of the gold
        perm = list(range(width))
        rnd.shuffle(perm)
        pred = [tuple(r[i] for i in perm) for r in gold]
        if not order:
            rnd.shuffle(pred)
    expected = _brute_exact(pred, gold, order, width)
    assert (
        exact_match(pred, gold, order_matters=order, pred_width=width, gold_width=width) == expected
    )


def test_exact_mode_normalises_types_and_respects_order_only_when_asked() -> None:
    assert exact_match([(Decimal("2.50"), 1.0)], [(2.5, 1)], order_matters=True)
    assert exact_match([(0.33333,)], [(1 / 3,)], order_matters=False)
    assert not exact_match([("1",)], [(1,)], order_matters=False)  # strict: text is not a number
    assert not exact_match([("kyle",)], [("Kyle",)], order_matters=False)  # no case folding
    assert exact_match(GOLD[::-1], GOLD, order_matters=False)
    assert not exact_match(GOLD[::-1], GOLD, order_matters=True)
    assert exact_match([("x", 1), ("y", 2)], [(1, "x"), (2, "y")], order_matters=True)
    assert not exact_match([("x", 2), ("y", 1)], [(1, "x"), (2, "y")], order_matters=False)
    assert not exact_match([], [], order_matters=False, pred_width=1, gold_width=2)
    assert exact_match([], [], order_matters=False, pred_width=2, gold_width=2)
    assert not exact_match(None, [], order_matters=False)


@pytest.mark.parametrize(
    ("sql", "orders"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("SELECT a FROM t", False),
        ("SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY b LIMIT 3)", False),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a)", False),
    ],
)
def test_outer_order_detection(sql: str, orders: bool) -> None:
    assert outer_query_orders(sql) is orders
