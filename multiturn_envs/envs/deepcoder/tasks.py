"""The coding-task model shared by every DeepCoder-MT data source, and the bundled source.

A :class:`CodeTask` is everything one episode needs: the statement shown to the agent, the
tests the sandbox runs (ALL of them score a submission), an optional reference solution (the
expert) and, for HumanEval, the code wrapped around a submission before it runs.

Sources are lazy: a :class:`TaskSource` lists task ids cheaply and builds one task on demand, so
a dataset with multi-gigabyte shards keeps only the running problem's tests in memory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from typing import Any, Literal, Protocol, runtime_checkable

from multiturn_envs.sandbox.base import TestCase

Style = Literal["stdio", "functional"]


@dataclass(frozen=True)
class CodeTask:
    """One coding problem.

    Attributes:
        task_id: unique id, ``"<source>/<name>"``.
        statement: the problem text (no answer-format section: the env adds it).
        style: ``"stdio"`` (read stdin, write stdout) or ``"functional"`` (define ``fn_name``).
        tests: every test a submission runs against; the pass rate over all of them is the
            step oracle.
        starter_code: the stub the answer must complete (``""`` for stdio problems).
        fn_name: the function (or ``class Solution`` method) functional tests call.
        reference: a known-correct program (the expert action), ``None`` when the source has none.
        program_prefix: code placed before the submission when it runs (HumanEval's prompt, so
            that a bare function body completes it as in the official evaluation).
        program_suffix: code placed after it (HumanEval's check harness).
        test_labels: what feedback shows as a test's input, when the raw input is not readable
            (HumanEval's assert statements); empty means "show the input".
        difficulty: an ordinal difficulty where the source has one.
        source: the dataset the task came from.
        metadata: source-specific extras (JSON-compatible).
    """

    task_id: str
    statement: str
    style: Style
    tests: tuple[TestCase, ...]
    starter_code: str = ""
    fn_name: str | None = None
    reference: str | None = None
    program_prefix: str = ""
    program_suffix: str = ""
    test_labels: tuple[str, ...] = ()
    difficulty: int | None = None
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.tests:
            raise ValueError(f"task {self.task_id} has no tests")
        if self.test_labels and len(self.test_labels) != len(self.tests):
            raise ValueError(f"task {self.task_id}: one label per test, or none")

    def program_for(self, submission: str) -> str:
        """The program the sandbox runs for ``submission`` (prefix + submission + suffix)."""
        parts = [p for p in (self.program_prefix, submission, self.program_suffix) if p]
        return "\n\n".join(parts) if len(parts) > 1 else submission

    def label(self, index: int) -> str:
        """How feedback names test ``index``'s input."""
        return self.test_labels[index] if self.test_labels else self.tests[index].input


@runtime_checkable
class TaskSource(Protocol):
    """A lazily loaded collection of tasks."""

    name: str

    def task_ids(self) -> Sequence[str]:
        """All task ids, in a stable order (cheap: no tests are read)."""
        ...

    def load(self, task_id: str) -> CodeTask:
        """Build one task (its tests are read now, and only now)."""
        ...


def _tests_from_records(
    records: Sequence[dict[str, Any]], style: Style, fn_name: str | None
) -> tuple[TestCase, ...]:
    kind: Literal["stdio", "functional"] = "functional" if style == "functional" else "stdio"
    return tuple(
        TestCase(kind=kind, input=str(r["input"]), expected=str(r["expected"]), fn_name=fn_name)
        for r in records
    )


class BundledSource:
    """The problems written for this project (``bundled/problems.json``), all offline.

    Graded difficulty 1 (easy) to 4 (hard), stdin/stdout and functional styles (plain functions
    and LeetCode-style ``class Solution`` methods), each with a reference solution and at least
    six hand-checked tests including edge cases.

    Args:
        difficulty: keep only problems of these difficulties (``None``: all).
        style: keep only ``"stdio"`` or ``"functional"`` problems (``None``: both).
    """

    name = "bundled"
    resource = ("multiturn_envs.envs.deepcoder.bundled", "problems.json")

    def __init__(
        self, difficulty: Sequence[int] | int | None = None, style: Style | None = None
    ) -> None:
        if isinstance(difficulty, int):
            difficulty = (difficulty,)
        self._difficulty = None if difficulty is None else tuple(int(d) for d in difficulty)
        if style not in (None, "stdio", "functional"):
            raise ValueError(f"style must be 'stdio', 'functional' or None, got {style!r}")
        self._style = style

    @cached_property
    def _records(self) -> dict[str, dict[str, Any]]:
        package, filename = self.resource
        text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
        records = {}
        for p in json.loads(text)["problems"]:
            if self._difficulty is not None and p["difficulty"] not in self._difficulty:
                continue
            if self._style is not None and p["style"] != self._style:
                continue
            records[p["id"]] = p
        return records

    def task_ids(self) -> Sequence[str]:
        return list(self._records)

    def load(self, task_id: str) -> CodeTask:
        try:
            p = self._records[task_id]
        except KeyError:
            raise KeyError(f"no bundled task {task_id!r}") from None
        return CodeTask(
            task_id=p["id"],
            statement=f"{p['title']}\n\n{p['statement']}",
            style=p["style"],
            tests=_tests_from_records(p["tests"], p["style"], p.get("fn_name")),
            starter_code=p.get("starter_code") or "",
            fn_name=p.get("fn_name"),
            reference=p["reference"],
            difficulty=int(p["difficulty"]),
            source=self.name,
            metadata={"title": p["title"]},
        )
