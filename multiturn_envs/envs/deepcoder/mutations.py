"""Plausible bugs: single-site mutants of a reference solution (the env's ``error_action``).

The study injects "an error at the step just before" and asks whether the policy recovers. For
code repair a realistic error is a program that is *almost* right: the reference with one typical
slip, the kind a programmer makes and a judge catches. Each operator below makes one such slip
at one place in the syntax tree:

* ``flip_comparison``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=`` (wrong boundary);
* ``off_by_one``: an integer literal ``k`` becomes ``k + 1`` or ``k - 1``;
* ``swap_arithmetic``: ``+`` <-> ``-``, ``*`` -> ``+``, ``//`` <-> ``%``, ``/`` -> ``//``
  (wrong formula);
* ``range_boundary``: ``range(.., stop)`` runs to ``stop + 1`` or ``stop - 1`` (wrong boundary);
* ``drop_step``: ``reversed(x)``, ``sorted(x)``, ``abs(x)``, ``set(x)`` become ``x`` (a forgotten
  step);
* ``swap_method``: ``.append`` <-> ``.extend`` (a forgotten unpacking);
* ``swap_indices``: ``a[i][j]`` -> ``a[j][i]`` (transposed indexing);
* ``swap_boolean``: ``and`` <-> ``or``, ``not x`` -> ``x``;
* ``swap_min_max``: ``min`` <-> ``max``;
* ``drop_case``: an ``if`` without ``else`` (an edge case, an early return) is deleted, or an
  ``if``/``elif`` chain loses a branch;
* ``flip_constant``: ``True`` <-> ``False``.

A mutant is only a *candidate*: whether it fails a test is decided by running it (see
:meth:`multiturn_envs.envs.deepcoder.env.DeepCoderEnv.error_action`). Mutations inside ``while``
conditions are skipped because they mostly produce infinite loops (a timeout, not a wrong answer,
and slow to verify).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

_COMPARE_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
_ARITH_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mod,
    ast.Div: ast.FloorDiv,
    ast.Mod: ast.FloorDiv,
}
_DROPPABLE_CALLS = frozenset({"reversed", "sorted", "abs", "set"})
_METHOD_SWAPS = {"append": "extend", "extend": "append"}


@dataclass(frozen=True)
class Mutant:
    """One candidate buggy program.

    Attributes:
        source: the mutated program.
        operator: which operator made it (``"off_by_one"``, ...).
        line: the line of the reference it changed.
    """

    source: str
    operator: str
    line: int


def _while_test_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside a ``while`` condition."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.While):
            inside.update(id(n) for n in ast.walk(node.test))
    return inside


def _sites(tree: ast.AST) -> Iterator[tuple[str, ast.AST, int]]:
    """(operator, node, variant) for every mutation site, in a stable (walk) order."""
    skip = _while_test_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in _COMPARE_FLIPS:
                    yield "flip_comparison", node, k
        elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _ARITH_SWAPS:
            yield "swap_arithmetic", node, 0
        elif isinstance(node, ast.BoolOp) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
        ):
            yield "swap_boolean", node, 0
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                yield "flip_constant", node, 0
            elif isinstance(node.value, int) and abs(node.value) <= 1000:
                yield "off_by_one", node, +1
                yield "off_by_one", node, -1
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("min", "max")
        ):
            yield "swap_min_max", node, 0
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "range" and 1 <= len(node.args) <= 2:
                yield "range_boundary", node, +1
                yield "range_boundary", node, -1
            elif node.func.id in _DROPPABLE_CALLS and len(node.args) == 1 and not node.keywords:
                yield "drop_step", node, 0
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _METHOD_SWAPS
        ):
            yield "swap_method", node, 0
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Subscript)
            and isinstance(node.slice, ast.Name)
            and isinstance(node.value.slice, ast.Name)
            and node.slice.id != node.value.slice.id
        ):
            yield "swap_indices", node, 0
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.For | ast.If | ast.With):
            for k, stmt in enumerate(node.body):
                if isinstance(stmt, ast.If) and (len(node.body) > 1 or not stmt.orelse):
                    yield "drop_case", stmt, k
        if (
            isinstance(node, ast.If)
            and len(node.orelse) == 1
            and isinstance(node.orelse[0], ast.If)
        ):
            yield "drop_case", node, -1  # drop the elif branch


def _apply(node: ast.AST, operator: str, variant: int, parents: dict[int, ast.AST]) -> bool:
    """Mutate ``node`` in place (it lives in a copied tree); False when not applicable."""
    if operator == "flip_comparison":
        assert isinstance(node, ast.Compare)
        node.ops[variant] = _COMPARE_FLIPS[type(node.ops[variant])]()
    elif operator == "swap_arithmetic":
        assert isinstance(node, ast.BinOp | ast.AugAssign)
        node.op = _ARITH_SWAPS[type(node.op)]()
    elif operator == "swap_boolean":
        if isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        else:
            assert isinstance(node, ast.UnaryOp)
            parent = parents[id(node)]
            _replace_child(parent, node, node.operand)
    elif operator == "flip_constant":
        assert isinstance(node, ast.Constant)
        node.value = not node.value
    elif operator == "off_by_one":
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        node.value = int(node.value) + variant
    elif operator == "swap_min_max":
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        node.func.id = "max" if node.func.id == "min" else "min"
    elif operator == "range_boundary":
        assert isinstance(node, ast.Call)
        stop = node.args[-1]
        op: ast.operator = ast.Add() if variant > 0 else ast.Sub()
        node.args[-1] = ast.BinOp(left=stop, op=op, right=ast.Constant(1))
    elif operator == "drop_step":
        assert isinstance(node, ast.Call)
        _replace_child(parents[id(node)], node, node.args[0])
    elif operator == "swap_method":
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        node.func.attr = _METHOD_SWAPS[node.func.attr]
    elif operator == "swap_indices":
        assert isinstance(node, ast.Subscript) and isinstance(node.value, ast.Subscript)
        node.slice, node.value.slice = node.value.slice, node.slice
    elif operator == "drop_case":
        if variant == -1:
            assert isinstance(node, ast.If)
            inner = node.orelse[0]
            assert isinstance(inner, ast.If)  # an elif chain
            node.orelse = inner.orelse
        else:
            parent = parents[id(node)]
            body: list[ast.stmt] = parent.body  # type: ignore[attr-defined]
            del body[variant]
            if not body:
                body.append(ast.Pass())
    else:  # pragma: no cover - the operator list is closed
        return False
    return True


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def mutants(reference: str, limit: int | None = None) -> list[Mutant]:
    """Every distinct single-site mutant of ``reference`` that still compiles, in stable order.

    Returns ``[]`` when the reference does not parse. ``limit`` caps the list (the first ones).
    """
    try:
        tree = ast.parse(reference)
    except (SyntaxError, ValueError):
        return []
    original = ast.unparse(tree)
    sites = list(_sites(tree))
    # Index sites by walk position, so the same site can be found in a fresh copy.
    order = {id(n): i for i, n in enumerate(ast.walk(tree))}
    seen = {original}
    found: list[Mutant] = []
    for operator, node, variant in sites:
        copied = copy.deepcopy(tree)
        target = next(n for i, n in enumerate(ast.walk(copied)) if i == order[id(node)])
        if not _apply(target, operator, variant, _parents(copied)):
            continue
        ast.fix_missing_locations(copied)
        try:
            source = ast.unparse(copied)
            compile(source, "<mutant>", "exec")
        except (SyntaxError, ValueError, RecursionError):
            continue
        if source in seen:
            continue
        seen.add(source)
        found.append(
            Mutant(source=source + "\n", operator=operator, line=getattr(node, "lineno", 0))
        )
        if limit is not None and len(found) >= limit:
            break
    return found


def fallback_wrong_program(style: str, fn_name: str | None) -> str:
    """A program that runs and answers nothing useful: the error action of last resort."""
    if style == "functional" and fn_name:
        return (
            f"def {fn_name}(*args, **kwargs):\n    return None\n\n\n"
            f"class Solution:\n    def {fn_name}(self, *args, **kwargs):\n        return None\n"
        )
    return "print()\n"
