"""The one small interface every code-execution backend implements.

A backend runs one program against a list of tests under limits and returns one result per test,
always for ALL tests (the pass rate is DeepCoder-MT's step oracle, so a run never stops at the
first failure). Backends: ``docker`` (pooled, hardened containers; the default where an engine
answers) and ``local`` (subprocesses with resource limits; not a security boundary).
"""

from __future__ import annotations

import abc
import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from multiturn_envs.deprecation import renamed_attribute

TestKind = Literal["stdio", "functional"]
AfterTimeout = Literal["stop", "continue"]


@dataclass(frozen=True)
class TestCase:
    """One unit test.

    Attributes:
        kind: ``"stdio"`` (feed ``input`` on stdin, compare stdout with ``expected``) or
            ``"functional"`` (call ``fn_name`` with the JSON array ``input`` as positional
            arguments, compare the return value with the JSON ``expected``). A functional test
            on a program defining ``class Solution`` calls ``Solution().fn_name(*args)``.
        input: stdin text, or a JSON array of arguments.
        expected: the expected stdout, or the JSON of the expected return value.
        fn_name: the function or method to call (functional tests only).
    """

    __test__ = False  # not a pytest test class

    kind: TestKind
    input: str
    expected: str
    fn_name: str | None = None


@dataclass(frozen=True)
class RunLimits:
    """Resource limits of one run.

    Attributes:
        timeout_s: wall-clock limit per test.
        memory_mb: address-space / cgroup memory limit for the program.
        max_output_bytes: stdout/stderr kept per test (the rest is dropped, never buffered).
        numeric_tolerance: when set, numeric tokens compare equal within this absolute/relative
            tolerance (judges' float checking); ``None``: exact token comparison.
        deadline_s: wall-clock cap on the whole run (all tests together). A test still running
            when it passes is killed (``timed_out``, its error names the deadline) and the tests
            after it are not run (``not_run``). ``None``: no cap (a run may take every test's
            limit). :func:`default_deadline` is the DeepCoder env's default.
        after_timeout: what the first test that exceeds its limit does to the rest of the run:
            ``"stop"`` (default): the remaining tests are not run, so a program that loops,
            sleeps or floods costs ONE per-test limit, not one per test; ``"continue"``: every
            test still runs at its own limit (the behaviour before deadlines existed). A program
            that timed out on one test almost always times out on the others (LiveCodeBench's
            grader stops at the first failure of any kind); tests it would have passed count as
            failed, and the feedback says they were not run.
    """

    timeout_s: float = 2.0
    memory_mb: int = 256
    max_output_bytes: int = 64 * 1024
    numeric_tolerance: float | None = None
    deadline_s: float | None = None
    after_timeout: AfterTimeout = "stop"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number, got {self.timeout_s!r}")
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise ValueError(f"deadline_s must be positive or None, got {self.deadline_s!r}")
        if self.after_timeout not in ("stop", "continue"):
            raise ValueError(
                f"after_timeout must be 'stop' or 'continue', got {self.after_timeout!r}"
            )


def default_deadline(timeout_s: float, n_tests: int) -> float:
    """The default wall-clock cap of one submission: one full per-test limit (for the one slow
    test the stop-after-timeout rule allows) plus a quarter limit per test.

    A looping program is stopped by ``after_timeout="stop"`` after one limit; this cap bounds
    the other hostile shape, a program slow on EVERY test but never over the limit (5.9 s
    each under a 6 s limit: 16.5 s for 7 tests instead of 41 s), while a correct program may
    still average a quarter of the limit per test on top of one slow test.
    """
    return timeout_s * (1.0 + max(n_tests, 1) / 4.0)


@dataclass(frozen=True)
class TestResult:
    """The outcome of one test."""

    __test__ = False  # not a pytest test class

    passed: bool
    expected: str
    actual: str
    stderr: str
    exit_status: int | None
    time_s: float
    timed_out: bool = False
    memory_killed: bool = False
    error: str | None = None
    not_run: bool = False
    """The test never ran: an earlier one timed out (``after_timeout="stop"``), the run's
    deadline had passed, or the runner died first. It counts as failed."""


@dataclass(frozen=True)
class RunResult:
    """The outcome of one program against all its tests.

    ``error`` is set when the sandbox itself failed (engine gone, container died); then
    ``results`` may be empty and the env reports the failure instead of scoring it.
    """

    results: tuple[TestResult, ...]
    backend: str
    error: str | None = None

    @property
    def n_passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def n_not_run(self) -> int:
        return sum(r.not_run for r in self.results)

    @property
    def pass_rate(self) -> float:
        return self.n_passed / len(self.results) if self.results else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.results) and self.error is None and all(r.passed for r in self.results)


class Sandbox(abc.ABC):
    """A code-execution backend. Use it as a context manager, or call :meth:`close`."""

    name: str = "sandbox"

    @abc.abstractmethod
    def run(
        self, program: str, tests: Sequence[TestCase], limits: RunLimits | None = None
    ) -> RunResult:
        """Run ``program`` against every test in ``tests``."""

    async def arun(
        self, program: str, tests: Sequence[TestCase], limits: RunLimits | None = None
    ) -> RunResult:
        """Async :meth:`run` (in a worker thread; backends may override with native async)."""
        return await asyncio.to_thread(self.run, program, tests, limits)

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release containers and processes. Idempotent."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def __getattr__(name: str) -> Any:
    """Old names, read for one release (:mod:`multiturn_envs.deprecation`): ``Limits`` is
    ``RunLimits`` (issue 33: three classes named ``Limits`` meant three things)."""
    return renamed_attribute(__name__, name, {"Limits": RunLimits})
