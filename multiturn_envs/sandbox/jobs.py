"""The job file the runner reads and the report it writes, shared by every backend.

A job is a length-prefixed JSON header (program path, scratch directory, limits, the code's uid and
environment), then one line per test. Lines, not one JSON document, so that large test sets are
written and read as a stream. The report is the runner's stdout: one JSON line per finished
test, then ``{"done": true}``; :func:`parse_report` turns it into a :class:`RunResult` and fills
in a failed result for every test the runner never reported (it was killed halfway).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from multiturn_envs.sandbox.base import RunLimits, RunResult, TestCase, TestResult

RUNNER_PATH = Path(__file__).with_name("judge.py")

#: The environment a submitted program sees: nothing from the host, single-threaded BLAS.
CODE_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def header_frame(header: Mapping[str, Any]) -> bytes:
    """A header as the runner reads it: its byte length and a newline, the JSON, a newline."""
    encoded = json.dumps(header).encode("utf-8")
    return b"%d\n" % len(encoded) + encoded + b"\n"


def job_bytes(
    program_path: str,
    scratch: str,
    tests: Sequence[TestCase],
    limits: RunLimits,
    *,
    uid: int | None = None,
    gid: int | None = None,
    nproc: int | None = None,
    kill_all: bool = False,
    program_source: str | None = None,
    guard_s: float | None = None,
    wipe: Sequence[str] = (),
) -> Iterator[bytes]:
    """The job's bytes: the header's length, the header, then one JSON line per test.

    ``program_source``: when given, the runner writes it to ``program_path`` itself (the job
    then travels on the runner's stdin and nothing is written from outside). ``wipe``: folders
    the runner empties after the job (everything the code could write to, so that nothing it
    leaves reaches a later job in the same container). ``n_tests`` in the header lets a
    runner session (``runner.py --serve``) read several jobs from one stream.
    """
    header: dict[str, Any] = {
        "program": program_path,
        "scratch": scratch,
        "limits": asdict(limits),
        "uid": uid,
        "gid": gid if gid is not None else uid,
        "nproc": nproc,
        "kill_all": kill_all,
        "env": {**CODE_ENV, "HOME": scratch, "TMPDIR": scratch},
        "program_source": program_source,
        "guard_s": guard_s,
        "n_tests": len(tests),
        "wipe": list(wipe),
    }
    yield header_frame(header)
    for test in tests:
        yield (
            json.dumps(
                {
                    "kind": test.kind,
                    "input": test.input,
                    "expected": test.expected,
                    "fn_name": test.fn_name,
                }
            ).encode("utf-8")
            + b"\n"
        )


def guard_seconds(limits: RunLimits, n_tests: int) -> float:
    """The wall-clock bound on a whole run: every test at its limit (or the run's deadline,
    when it is shorter), plus start-up and per-test slack."""
    every_test = (limits.timeout_s + 1.0) * max(n_tests, 1) + 10.0
    if limits.deadline_s is None:
        return every_test
    return min(every_test, limits.deadline_s + 0.1 * n_tests + 10.0)


RUNNER_STDERR_CAP = 1 << 20
"""The most the runner itself may write to its stderr (a traceback of its own is a few KiB):
past it, its backend stops it as a runner gone wrong (the code's streams are the runner's
pipes, never its stderr)."""


def report_bytes(limits: RunLimits, n_tests: int) -> int:
    """The most a sound runner prints for ``n_tests`` tests: each report line holds at most
    three texts of ``max_output_bytes`` (output, stderr, the error's last stderr line), each
    JSON-escaped at most 12 bytes a character, plus its fixed fields. A backend stops a
    runner whose report passes it, so that no runner, however broken, makes the host buffer
    more."""
    per_test = 3 * 12 * limits.max_output_bytes + 4096
    return max(n_tests, 1) * per_test + 4096


def parse_report(
    stdout: str, tests: Sequence[TestCase], backend: str, died: str | None = None
) -> RunResult:
    """The runner's report as a :class:`RunResult`.

    Args:
        stdout: everything the runner printed.
        tests: the tests of the job, in order.
        backend: the backend's name, recorded in the result.
        died: why the runner did not finish (it was killed, the container died, ...); ``None``
            when it exited normally. Tests without a report then fail with this reason.
    """
    by_index: dict[int, dict[str, Any]] = {}
    done = False
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        if item.get("done"):
            done = True
        elif isinstance(item.get("i"), int):
            by_index[item["i"]] = item
    if not by_index and not done and tests:
        return RunResult(
            results=(),
            backend=backend,
            error=f"the test runner produced no report ({died or 'no output'})",
        )
    reason = died or ("the runner stopped before this test" if not done else None)
    results = []
    for index, test in enumerate(tests):
        item = by_index.get(index)
        if item is None:
            results.append(
                TestResult(
                    passed=False,
                    expected=test.expected,
                    actual="",
                    stderr="",
                    exit_status=None,
                    time_s=0.0,
                    error=f"not run: {reason or 'missing from the report'}",
                    not_run=True,
                )
            )
            continue
        results.append(
            TestResult(
                passed=bool(item["passed"]),
                expected=test.expected,
                actual=str(item.get("actual", "")),
                stderr=str(item.get("stderr", "")),
                exit_status=item.get("exit_status"),
                time_s=float(item.get("time_s", 0.0)),
                timed_out=bool(item.get("timed_out", False)),
                memory_killed=bool(item.get("memory_killed", False)),
                error=item.get("error"),
                not_run=bool(item.get("not_run", False)),
            )
        )
    return RunResult(results=tuple(results), backend=backend)
