"""The one small interface every code-execution backend implements.

A backend runs one program against a list of tests under limits and returns one result per test,
always for ALL tests (the pass rate is DeepCoder-MT's step oracle, so a run never stops at the
first failure). Backends: ``docker`` (pooled, hardened containers; the default where an engine
answers) and ``local`` (subprocesses with resource limits; not a security boundary).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

TestKind = Literal["stdio", "functional"]


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
class Limits:
    """Resource limits of one run.

    Attributes:
        timeout_s: wall-clock limit per test.
        memory_mb: address-space / cgroup memory limit for the program.
        max_output_bytes: stdout/stderr kept per test (the rest is dropped, never buffered).
        numeric_tolerance: when set, numeric tokens compare equal within this absolute/relative
            tolerance (judges' float checking); ``None``: exact token comparison.
    """

    timeout_s: float = 2.0
    memory_mb: int = 256
    max_output_bytes: int = 64 * 1024
    numeric_tolerance: float | None = None


@dataclass(frozen=True)
class TestResult:
    """The outcome of one test."""

    passed: bool
    expected: str
    actual: str
    stderr: str
    exit_status: int | None
    time_s: float
    timed_out: bool = False
    memory_killed: bool = False
    error: str | None = None


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
        self, program: str, tests: Sequence[TestCase], limits: Limits | None = None
    ) -> RunResult:
        """Run ``program`` against every test in ``tests``."""

    async def arun(
        self, program: str, tests: Sequence[TestCase], limits: Limits | None = None
    ) -> RunResult:
        """Async :meth:`run` (in a worker thread; backends may override with native async)."""
        return await asyncio.to_thread(self.run, program, tests, limits)

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release containers and processes. Idempotent."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
