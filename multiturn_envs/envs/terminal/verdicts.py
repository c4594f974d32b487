"""Turning what a task's tests left behind into a verdict, the way each harness does.

Three rules, one per task format, each read by the host from what the checker's runner itself
observed (never from anything the agent's files could stand in for):

* ``exit-status`` (the bundled tasks, and :class:`~multiturn_envs.sandbox.checker.Check`
  lists): each check passes when its process exits with status 0; the runner waits for it.
* ``pytest-summary`` (Terminal-Bench 1): Terminal-Bench's ``PytestParser`` on the output of
  ``run-tests.sh``: the text after the FIRST ``short test summary info`` header, one
  ``STATUS path::test`` line per test (``-rA``); PASSED, XFAIL and SKIPPED pass, FAILED, ERROR
  and XPASS fail; no header is a parse error, which fails the task. The exit status of
  ``run-tests.sh`` plays no part (a module that ``os._exit(0)``\\s inside pytest prints no
  summary and fails, as in Terminal-Bench).
* ``reward-file`` (Harbor, Terminal-Bench 2): ``/logs/verifier/reward.json`` if present, else
  ``reward.txt``, read by the runner after every test process is dead; the reward is its
  number (``reward.json``'s ``"reward"`` key, or its only number), refused when it is not a
  finite number in [0, 1]; success is a reward of 1.

:func:`report_from_answer` applies the job's rule to the checker's answer
(:meth:`multiturn_envs.sandbox.checker.Checker.check`) and gives the :class:`CheckReport` the
env scores.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from multiturn_envs.safejson import JSONLimitError, loads_bounded
from multiturn_envs.sandbox.checker import CheckJob

VERDICTS = ("exit-status", "pytest-summary", "reward-file")

_SUMMARY = re.compile(r"=+\s*short test summary info\s*=+", re.IGNORECASE)
_PASS = ("PASSED", "XFAIL", "SKIPPED")
_FAIL = ("FAILED", "ERROR", "XPASS")


def parse_pytest_summary(output: str) -> dict[str, bool] | None:
    """Terminal-Bench 1's ``PytestParser``: test name -> passed, or ``None`` (no summary).

    As in Terminal-Bench: the text is split at the first summary header; a FAILED line's
    `` - message`` is cut at its last `` - ``; the status may carry a trailing ``:``; the name is
    what follows ``::`` (the whole path when there is none); a later line for the same name
    replaces an earlier one; lines with another first word are ignored.
    """
    parts = _SUMMARY.split(output, maxsplit=1)
    if len(parts) < 2:
        return None
    results: dict[str, bool] = {}
    for line in parts[1].splitlines():
        if line.startswith("FAILED"):
            pieces = line.split(" - ")
            if len(pieces) > 1:
                line = " - ".join(pieces[:-1])
        fields = line.split(maxsplit=1)
        if len(fields) <= 1:
            continue
        status = fields[0].strip().strip(":")
        if status not in _PASS and status not in _FAIL:
            continue
        name = fields[1].strip().split("::", 1)[-1]
        if not name:
            continue
        results[name] = status in _PASS
    return results


@dataclass(frozen=True)
class Reward:
    """A Harbor reward: ``value`` in [0, 1], or ``None`` with the ``problem`` that refused it."""

    value: float | None
    source: str
    problem: str | None = None


def _finite_unit(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        return None
    return number


def parse_reward(reward_json: str | None, reward_txt: str | None) -> Reward:
    """Harbor's reward files, ``reward.json`` first (see the module docstring)."""
    if reward_json is not None:
        if not reward_json.strip():
            return Reward(None, "reward.json", "reward.json is empty")
        try:  # written in the agent's container: measured before it is parsed
            data = loads_bounded(reward_json, max_bytes=len(reward_json), max_depth=16)
        except JSONLimitError as exc:
            return Reward(None, "reward.json", f"reward.json is refused: {exc}")
        except ValueError:
            return Reward(None, "reward.json", "reward.json is not JSON")
        if isinstance(data, dict):
            if "reward" in data:
                value = _finite_unit(data["reward"])
            else:
                numbers = [v for v in data.values() if _finite_unit(v) is not None]
                value = _finite_unit(numbers[0]) if len(numbers) == 1 else None
        else:
            value = _finite_unit(data)
        if value is None:
            return Reward(None, "reward.json", "reward.json holds no reward in [0, 1]")
        return Reward(value, "reward.json")
    if reward_txt is not None:
        text = reward_txt.strip()
        if not text:
            return Reward(None, "reward.txt", "reward.txt is empty")
        try:
            value = _finite_unit(float(text))
        except ValueError:
            value = None
        if value is None:
            return Reward(
                None, "reward.txt", f"reward.txt is not a number in [0, 1]: {text[:40]!r}"
            )
        return Reward(value, "reward.txt")
    return Reward(None, "", "the tests wrote no /logs/verifier/reward.txt or reward.json")


@dataclass(frozen=True)
class CheckReport:
    """The tests' verdict on one state.

    ``names``/``passed``: the checks (``exit-status``) or the tests (``pytest-summary``) and
    whether each passed; ``reward``: the Harbor reward (``reward-file``); ``error``: the tests
    could not be run (the verdict is then a failure); ``note``: why a verdict failed that is
    not in the tests' own words (no pytest summary, no reward file, a state too large).
    """

    names: tuple[str, ...]
    passed: tuple[bool, ...]
    outputs: tuple[str, ...]
    error: str | None = None
    reward: float | None = None
    note: str | None = None

    @property
    def score(self) -> float:
        """The share of checks passing, or the reward (0 when the tests could not run)."""
        if self.error is not None:
            return 0.0
        if self.reward is not None:
            return self.reward
        if not self.passed:
            return 0.0
        return sum(self.passed) / len(self.passed)

    @property
    def all_passed(self) -> bool:
        if self.error is not None:
            return False
        if self.reward is not None:
            return self.reward >= 1.0
        return bool(self.passed) and all(self.passed)


def report_from_answer(answer: dict[str, Any], job: CheckJob) -> CheckReport:
    """The verdict of a runner's answer under the job's rule (:mod:`.verdicts`)."""
    names = tuple(c.name for c in job.checks)
    if "error" in answer:
        return CheckReport(names, (), (), error=str(answer["error"]))
    results = answer["results"]
    outputs = tuple(str(r["output"]) for r in results)
    if job.verdict == "exit-status":
        return CheckReport(
            tuple(str(r["name"]) for r in results),
            tuple(bool(r["passed"]) for r in results),
            outputs,
        )
    if job.verdict == "pytest-summary":
        tests = parse_pytest_summary(outputs[0] if outputs else "")
        if tests is None:
            why = "the tests printed no pytest summary (Terminal-Bench: a parse error)"
            if results and results[0].get("timed_out"):
                why = f"the tests did not finish within {job.timeout_s:g} s"
            return CheckReport(names, (False,), outputs, note=why)
        if not tests:
            return CheckReport(names, (False,), outputs, note="the pytest summary lists no test")
        return CheckReport(tuple(tests), tuple(tests.values()), outputs)
    reward = parse_reward(answer.get("reward_json"), answer.get("reward_txt"))
    if reward.value is None:
        return CheckReport(names, (False,), outputs, reward=0.0, note=reward.problem)
    return CheckReport(names, (reward.value >= 1.0,), outputs, reward=reward.value)
