"""A small stand-in for the pytest-json-ctrf plugin (``--ctrf FILE``): the CTRF report that
Terminal-Bench 2 tests write next to their reward, for images that cannot download it."""

import json
import time

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ctrf", default=None, help="write a CTRF JSON report to this file")


_results: list[dict[str, object]] = []
_start = [0.0]


def pytest_sessionstart(session: pytest.Session) -> None:
    _start[0] = time.time()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        status = "passed" if report.passed else "skipped" if report.skipped else "failed"
        _results.append(
            {"name": report.nodeid, "status": status, "duration": int(report.duration * 1000)}
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--ctrf")
    if not path:
        return
    summary = {
        k: sum(1 for r in _results if r["status"] == k) for k in ("passed", "failed", "skipped")
    }
    report = {
        "results": {
            "tool": {"name": "pytest"},
            "summary": {
                "tests": len(_results),
                **summary,
                "pending": 0,
                "other": 0,
                "start": int(_start[0] * 1000),
                "stop": int(time.time() * 1000),
            },
            "tests": _results,
        }
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
