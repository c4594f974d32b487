"""Behaviour every backend shares: all tests run, verdicts, formats, limits, big tests."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from multiturn_envs.sandbox.base import RunLimits, Sandbox, TestCase

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def add_tests(n: int) -> list[TestCase]:
    return [TestCase("stdio", f"{i} {2 * i}\n", f"{3 * i}\n") for i in range(n)]


def test_all_tests_run_past_a_failure(sandbox: Sandbox) -> None:
    tests = [*add_tests(2), TestCase("stdio", "1 1", "3"), *add_tests(3)]
    result = sandbox.run(ADD, tests)
    assert result.error is None
    assert len(result.results) == 6
    assert [r.passed for r in result.results] == [True, True, False, True, True, True]
    assert result.pass_rate == 5 / 6 and not result.all_passed
    bad = result.results[2]
    assert bad.actual.strip() == "2" and bad.expected == "3" and bad.error == "wrong answer"
    assert bad.exit_status == 0 and not bad.timed_out


def test_functional_solution_method_and_function(sandbox: Sandbox) -> None:
    method = "class Solution:\n    def twoSum(self, nums, t):\n        return (0, 1)\n"
    tests = [
        TestCase("functional", "[[2, 7, 11], 9]", "[0, 1]", "twoSum"),
        TestCase("functional", "[2, 7, 11]\n9", "[0, 1]", "twoSum"),  # LiveCodeBench shape
        TestCase("functional", "[[3, 3], 6]", "[1, 0]", "twoSum"),
    ]
    result = sandbox.run(method, tests)
    assert [r.passed for r in result.results] == [True, True, False]
    assert json.loads(result.results[2].actual) == [0, 1]
    function = "def inc(x):\n    print('noise on stdout is ignored')\n    return x + 1\n"
    result = sandbox.run(function, [TestCase("functional", "[41]", "42", "inc")])
    assert result.all_passed
    result = sandbox.run(function, [TestCase("functional", "[41]", "42", "missing")])
    assert not result.results[0].passed and "missing" in (result.results[0].error or "")


def test_errors_are_reported_not_raised(sandbox: Sandbox) -> None:
    result = sandbox.run("def f(:\n", add_tests(2))
    assert all(not r.passed for r in result.results)
    assert "SyntaxError" in result.results[0].stderr
    result = sandbox.run("raise ValueError('boom')", add_tests(1))
    r = result.results[0]
    assert r.exit_status == 1 and "boom" in (r.error or "") and "ValueError" in r.stderr
    result = sandbox.run(
        "import sys\nprint(3)\nsys.exit(0)\nprint(4)", [TestCase("stdio", "", "3")]
    )
    assert result.all_passed
    result = sandbox.run("import sys\nsys.exit(3)", [TestCase("stdio", "", "")])
    assert result.results[0].exit_status == 3 and not result.results[0].passed


def test_timeout_then_still_working(sandbox: Sandbox) -> None:
    limits = RunLimits(timeout_s=0.5)
    result = sandbox.run("while True:\n    pass\n", add_tests(2), limits)
    first, second = result.results
    assert first.timed_out and not first.passed and 0.4 <= first.time_s < 3.0
    assert second.not_run and not second.passed and not second.timed_out
    assert result.n_not_run == 1 and result.pass_rate == 0.0
    assert sandbox.run(ADD, add_tests(3), limits).all_passed


def test_large_tests_travel_as_files(sandbox: Sandbox) -> None:
    n = 200_000
    numbers = " ".join(str(i) for i in range(n))
    program = (
        "import sys\nxs = list(map(int, sys.stdin.read().split()))\nprint(*[x * 2 for x in xs])\n"
    )
    expected = " ".join(str(2 * i) for i in range(n))
    result = sandbox.run(program, [TestCase("stdio", numbers, expected)], RunLimits(timeout_s=10))
    assert result.all_passed, result.results[0].error
    assert len(result.results[0].actual) <= 64 * 1024 + 200  # the report is truncated


def test_numeric_tolerance_is_opt_in(sandbox: Sandbox) -> None:
    program = "print(1 / 3)"
    test = TestCase("stdio", "", "0.333333")
    assert not sandbox.run(program, [test]).all_passed
    assert sandbox.run(program, [test], RunLimits(numeric_tolerance=1e-5)).all_passed


def test_unicode_and_empty(sandbox: Sandbox) -> None:
    result = sandbox.run("print(input()[::-1])", [TestCase("stdio", "héllo→wörld", "dlröw→olléh")])
    assert result.all_passed
    empty = sandbox.run(ADD, [])
    assert empty.results == () and empty.pass_rate == 0.0 and not empty.all_passed


def test_concurrent_runs(sandbox: Sandbox) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda _: sandbox.run(ADD, add_tests(4)), range(6)))
    assert all(r.all_passed for r in results)


def test_scratch_is_fresh_per_test(sandbox: Sandbox) -> None:
    program = "import os\nprint(len(os.listdir('.')))\nopen('left-behind.txt', 'w').write('x')\n"
    result = sandbox.run(program, [TestCase("stdio", "", "0")] * 3)
    assert result.all_passed, [r.actual for r in result.results]


def test_make_sandbox_by_name() -> None:
    import pytest

    from multiturn_envs.sandbox import make_sandbox

    local = make_sandbox("local", quiet=True)
    assert local.name == "local" and local.run(ADD, add_tests(2)).all_passed
    with pytest.raises(ValueError, match="backend"):
        make_sandbox("vm")


def test_a_local_runner_that_floods_is_stopped_at_its_bound(tmp_path: Path) -> None:
    """Bound: the local backend reads at most ``report_bytes`` of a runner's report and
    ``RUNNER_STDERR_CAP`` of its stderr (``communicate`` buffered all of it): a broken runner
    (here a stand-in interpreter that floods either stream) is killed and the run says why."""
    from multiturn_envs.sandbox.local import LocalSandbox

    for stream, why in (("", "report"), (">&2", "stderr")):
        fake = tmp_path / f"python{len(stream)}"
        fake.write_text(f"#!/bin/sh\nexec yes flood {stream}\n")
        fake.chmod(0o755)
        sandbox = LocalSandbox(python=str(fake), bwrap=False, quiet=True)
        start = time.monotonic()
        result = sandbox.run(ADD, add_tests(2), RunLimits(timeout_s=1.0))
        assert time.monotonic() - start < 10  # the time guard is 14 s
        assert result.error is not None and f"the runner's {why} passed its bound" in result.error
