"""The bundled problem set and the task model."""

from __future__ import annotations

import ast
import json
from collections import Counter

import pytest

from multiturn_envs.envs.deepcoder.sources import make_source
from multiturn_envs.envs.deepcoder.tasks import BundledSource, CodeTask
from multiturn_envs.sandbox.base import TestCase as SandboxTest


def test_bundled_set_size_styles_and_grades() -> None:
    source = BundledSource()
    tasks = [source.load(t) for t in source.task_ids()]
    assert len(tasks) >= 40
    styles = Counter(t.style for t in tasks)
    assert styles["stdio"] >= 15 and styles["functional"] >= 15
    grades = Counter(t.difficulty for t in tasks)
    assert set(grades) == {1, 2, 3, 4} and all(n >= 4 for n in grades.values())
    assert sum("class Solution" in t.starter_code for t in tasks) >= 4  # LeetCode shape
    assert len({t.task_id for t in tasks}) == len(tasks)


@pytest.mark.parametrize("task_id", BundledSource().task_ids())
def test_bundled_task_is_well_formed(task_id: str) -> None:
    task = BundledSource().load(task_id)
    assert task.task_id.startswith("bundled/")
    assert len(task.tests) >= 6
    assert task.reference is not None
    ast.parse(task.reference)
    assert len({(t.input, t.expected) for t in task.tests}) == len(task.tests), "duplicate test"
    for test in task.tests:
        assert test.kind == task.style
        if task.style == "functional":
            assert isinstance(json.loads(test.input), list)
            json.loads(test.expected)
            assert test.fn_name == task.fn_name and task.fn_name in task.starter_code
        else:
            assert test.fn_name is None and task.starter_code == ""


def test_bundled_filters() -> None:
    hard = BundledSource(difficulty=4)
    assert hard.task_ids() and all(hard.load(t).difficulty == 4 for t in hard.task_ids())
    stdio = BundledSource(style="stdio")
    assert all(stdio.load(t).style == "stdio" for t in stdio.task_ids())
    with pytest.raises(ValueError, match="style"):
        BundledSource(style="sql")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no bundled task"):
        BundledSource().load("bundled/nope")


def test_make_source_names_the_choices() -> None:
    assert make_source("bundled").name == "bundled"
    with pytest.raises(ValueError, match="bundled"):
        make_source("leetcode")


def test_program_for_wraps_only_when_needed() -> None:
    test = SandboxTest("stdio", "", "")
    plain = CodeTask("t/1", "s", "stdio", (test,))
    assert plain.program_for("print(1)") == "print(1)"
    wrapped = CodeTask("t/2", "s", "stdio", (test,), program_prefix="A", program_suffix="B")
    assert wrapped.program_for("x") == "A\n\nx\n\nB"
    with pytest.raises(ValueError, match="no tests"):
        CodeTask("t/3", "s", "stdio", ())
    with pytest.raises(ValueError, match="one label per test"):
        CodeTask("t/4", "s", "stdio", (test,), test_labels=("a", "b"))
