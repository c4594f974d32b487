"""A small stand-in for the pytest-json-ctrf plugin (``--ctrf FILE``): the CTRF report that
Terminal-Bench 2 tests write next to their reward, for images that cannot download it.

Installed as the distribution ``pytest-json-ctrf`` (its ``pytest11`` entry point), so
``pytest --ctrf``, ``python -m pytest --ctrf`` and ``pip install pytest-json-ctrf`` all find it.
"""

from __future__ import annotations

import json
import time

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ctrf", default=None, help="write a CTRF JSON report to this file")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--ctrf")
    if path:
        config.pluginmanager.register(CtrfReport(str(path)), "mte-ctrf-report")


class CtrfReport:
    """One run's report: a test's outcome as its call (or a failed setup) gives it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.start = time.time()
        self.results: list[dict[str, object]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            status = "passed" if report.passed else "skipped" if report.skipped else "failed"
            self.results.append(
                {"name": report.nodeid, "status": status, "duration": int(report.duration * 1000)}
            )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        counts = {
            k: sum(1 for r in self.results if r["status"] == k)
            for k in ("passed", "failed", "skipped")
        }
        summary = {"tests": len(self.results), **counts, "pending": 0, "other": 0}
        summary.update(start=int(self.start * 1000), stop=int(time.time() * 1000))
        results = {"tool": {"name": "pytest"}, "summary": summary, "tests": self.results}
        try:
            with open(self.path, "w", encoding="utf-8") as handle:
                json.dump({"results": results}, handle)
        except OSError as exc:  # as the real plugin: the run's verdict does not depend on it
            print(f"ctrf: could not write {self.path}: {exc}")
