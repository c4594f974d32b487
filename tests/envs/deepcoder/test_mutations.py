"""Single-site mutants: properties that hold for any program, and each operator's effect."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.deepcoder.mutations import fallback_wrong_program, mutants

OPS = ["<", "<=", ">", ">=", "==", "!="]
ARITH = ["+", "-", "*", "//", "%"]


@st.composite
def programs(draw: st.DrawFn) -> str:
    """Small functions with comparisons, arithmetic, loops, branches and calls."""
    cmp_op = draw(st.sampled_from(OPS))
    arith = draw(st.sampled_from(ARITH))
    k = draw(st.integers(-5, 50))
    body = [
        "def f(xs, n):",
        "    total = 0",
        f"    for i in range(n, {k}):",
        f"        if xs[i] {cmp_op} n and i > 0:",
        f"            total += xs[i] {arith} {abs(k) + 1}",
    ]
    if draw(st.booleans()):
        body += ["        elif not xs:", "            return -1"]
    if draw(st.booleans()):
        body += ["    total = max(total, min(xs))", "    xs.append(total)"]
    body.append("    return sorted(xs)[0] + total")
    return "\n".join(body) + "\n"


@settings(max_examples=20)
@given(programs())
def test_mutants_compile_differ_and_are_deterministic(source: str) -> None:
    found = mutants(source)
    assert found, "every such program has mutation sites"
    assert found == mutants(source)
    original = ast.unparse(ast.parse(source))
    texts = [m.source for m in found]
    assert len(set(texts)) == len(texts) and original + "\n" not in texts
    for m in found:
        compile(m.source, "<mutant>", "exec")
        assert m.line >= 1


@settings(max_examples=20)
@given(programs())
def test_each_mutant_changes_one_site(source: str) -> None:
    """A mutant's tree differs from the original in one small region (one statement)."""
    original = ast.parse(source).body[0]
    assert isinstance(original, ast.FunctionDef)
    for m in mutants(source):
        mutated = ast.parse(m.source).body[0]
        assert isinstance(mutated, ast.FunctionDef)
        a = [ast.dump(s) for s in ast.walk(original) if isinstance(s, ast.stmt)]
        b = [ast.dump(s) for s in ast.walk(mutated) if isinstance(s, ast.stmt)]
        leaves_a = [d for d in a if "body=" not in d]
        leaves_b = [d for d in b if "body=" not in d]
        changed = len(set(leaves_a) ^ set(leaves_b))
        assert changed <= 3 or m.operator == "drop_case", (m.operator, m.source)


def test_operators_make_the_expected_slips() -> None:
    src = "def f(a, b):\n    if a < b:\n        return a + 1\n    return max(a, b)\n"
    by_op = {m.operator: m.source for m in mutants(src)}
    assert set(by_op) >= {"flip_comparison", "off_by_one", "swap_arithmetic", "swap_min_max"}
    sources = {m.source for m in mutants(src)}
    assert any("a <= b" in s for s in sources)
    assert any("a + 2" in s for s in sources) and any("a + 0" in s for s in sources)
    assert any("a - 1" in s for s in sources)
    assert any("min(a, b)" in s for s in sources)
    assert any("if a < b" not in s for s in sources)  # the dropped case


def test_while_conditions_are_left_alone_and_bad_source_gives_nothing() -> None:
    src = "def f(n):\n    while n < 10:\n        n += 3\n    return n\n"
    assert all("while n < 10" in m.source for m in mutants(src))
    assert mutants("def broken(:\n") == []
    assert len(mutants(src, limit=1)) == 1


def test_fallback_programs_run_and_define_the_entry_point() -> None:
    namespace: dict[str, object] = {}
    exec(fallback_wrong_program("functional", "solve"), namespace)
    assert namespace["solve"](1, 2) is None  # type: ignore[operator]
    assert namespace["Solution"]().solve(1) is None  # type: ignore[attr-defined]
    compile(fallback_wrong_program("stdio", None), "<fallback>", "exec")
