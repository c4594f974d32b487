"""The DeepCoder-Preview loader on local parquet and JSONL files written in the real schema.

One fixture row per subset shape (TACO stdin / functional / ``class Solution``, LiveCodeBench
stdin / functional, LCB-compressed private tests, Codeforces, PrimeIntellect stdin / functional
with string or decoded cells). Each row's reference solution must pass in the sandbox, which
checks that every shape is converted to the tests the dataset means.
"""

from __future__ import annotations

import base64
import importlib
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.envs.deepcoder import deepcoder_preview as dp
from multiturn_envs.envs.deepcoder.env import DeepCoderEnv
from multiturn_envs.testing import require


def _module_or_none(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# dev dependencies: present wherever tests run; a user's machine without them skips this
# module, a CI run (CI=true) fails it
datasets = _module_or_none("datasets")
pq = _module_or_none("pyarrow.parquet")
pa = _module_or_none("pyarrow")


@pytest.fixture(scope="module", autouse=True)
def _dataset_libraries() -> None:
    """First of the module's fixtures (module scope, autouse), so nothing touches a missing
    library before this says why."""
    require(
        datasets is not None and pq is not None and pa is not None,
        "the datasets and pyarrow packages (the dev extra)",
    )


def _lcb_compress(tests: list[dict[str, Any]]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


ROWS: list[dict[str, Any]] = [
    {  # taco, stdin
        "problem": "Read a and b, print a + b.",
        "tests": json.dumps(
            {"inputs": ["1 2\n", "5 5\n", "-1 1\n"], "outputs": ["3\n", "10\n", "0\n"]}
        ),
        "starter_code": "",
        "metadata": "{}",
        "solutions": ["a, b = map(int, input().split())\nprint(a + b)\n"],
    },
    {  # taco, functional (plain function); outputs wrapped in a list
        "problem": "Return the sum of a list.",
        "tests": json.dumps(
            {"fn_name": "total", "inputs": [[[1, 2, 3]], [[]], [[-4]]], "outputs": [[6], [0], [-4]]}
        ),
        "starter_code": "def total(xs):\n\t",
        "metadata": "{}",
        "solutions": ["def total(xs):\n    return sum(xs)\n"],
    },
    {  # taco, functional, LeetCode class; a list-valued output stays a list
        "problem": "Return the list reversed.",
        "tests": json.dumps(
            {"fn_name": "rev", "inputs": [[[1, 2]], [[]]], "outputs": [[[2, 1]], [[]]]}
        ),
        "starter_code": "class Solution:\n    def rev(self, xs: List[int]) -> List[int]:\n        ",
        "metadata": "{}",
        "solutions": [
            "class Solution:\n    def rev(self, xs: List[int]) -> List[int]:\n"
            "        return xs[::-1]\n"
        ],
    },
    {  # lcbv5, stdin
        "problem": "Given N and N numbers, print their maximum.",
        "tests": json.dumps(
            [
                {"input": "3\n1 5 2\n", "output": "5\n", "testtype": "stdin"},
                {"input": "1\n-3\n", "output": "-3\n", "testtype": "stdin"},
            ]
        ),
        "starter_code": "",
        "metadata": json.dumps({"contest_id": "abc999"}),
        "solutions": None,
    },
    {  # lcbv5, functional: one JSON value per line, output one JSON value, name in metadata
        "problem": "Return how many elements of nums are at least k.",
        "tests": json.dumps(
            [
                {"input": "[5, 3, 10, 8, 2]\n5", "output": "3", "testtype": "functional"},
                {"input": "[]\n1", "output": "0", "testtype": "functional"},
                {"input": "[1, 1]\n1", "output": "2", "testtype": "functional"},
            ]
        ),
        "starter_code": (
            "class Solution:\n    def countAtLeast(self, nums: List[int], k: int) -> int:\n        "
        ),
        "metadata": json.dumps({"func_name": "countAtLeast"}),
        "solutions": None,
    },
    {  # lcbv5 private tests, compressed (base64 + zlib + pickle of a JSON string)
        "problem": "Print the input string reversed.",
        "tests": _lcb_compress(
            [
                {"input": "abc\n", "output": "cba\n", "testtype": "stdin"},
                {"input": "x\n", "output": "x\n", "testtype": "stdin"},
            ]
        ),
        "starter_code": "",
        "metadata": "{}",
        "solutions": None,
    },
    {  # codeforces, stdin (several lines of output, trailing spaces are fine)
        "problem": "Print 1..n, one per line.",
        "tests": json.dumps(
            [
                {"input": "3\n", "output": "1\n2\n3\n", "testtype": "stdin"},
                {"input": "1\n", "output": "1 \n", "testtype": "stdin"},
            ]
        ),
        "starter_code": "",
        "metadata": "{}",
        "solutions": None,
    },
    {  # primeintellect, stdin
        "problem": "Print the product of two integers.",
        "tests": json.dumps(
            [
                {"input": "2 3\n", "output": "6\n", "type": "stdin_stdout", "fn_name": None},
                {"input": "0 9\n", "output": "0\n", "type": "stdin_stdout", "fn_name": None},
            ]
        ),
        "starter_code": "",
        "metadata": "{}",
        "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a * b)\n"]),
    },
    {  # primeintellect, functional: cells as JSON strings and as decoded values
        "problem": "Return x squared.",
        "tests": json.dumps(
            [
                {"input": "[3]", "output": "[9]", "type": "function_call", "fn_name": "square"},
                {"input": [-2], "output": [4], "type": "function_call", "fn_name": "square"},
            ]
        ),
        "starter_code": "def square(x):\n\t",
        "metadata": "{}",
        "solutions": ["def square(x):\n    return x * x\n"],
    },
]
# References for the rows without a `solutions` cell (the LCB subsets ship none).
EXTRA_SOLUTIONS = {
    3: "n = int(input())\nprint(max(map(int, input().split())))\n",
    4: "class Solution:\n    def countAtLeast(self, nums: List[int], k: int) -> int:\n"
    "        return sum(1 for v in nums if v >= k)\n",
    5: "print(input()[::-1])\n",
    6: "for i in range(1, int(input()) + 1):\n    print(i)\n",
}
STYLES = [
    "stdio",
    "functional",
    "functional",
    "stdio",
    "functional",
    "stdio",
    "stdio",
    "stdio",
    "functional",
]


def _write(tmp_path: Path) -> tuple[Path, Path]:
    parquet = tmp_path / "train-00000-of-00001.parquet"
    # parquet holds `solutions` as list<string>; the JSONL copy keeps one as a JSON string
    rows = [
        {
            **r,
            "solutions": json.loads(r["solutions"])
            if isinstance(r["solutions"], str)
            else r["solutions"],
        }
        for r in ROWS
    ]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, parquet)
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return parquet, jsonl


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("deepcoder")
    parquet, jsonl = _write(tmp)
    return parquet, jsonl, tmp / "hf-cache"


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_every_shape_converts_and_its_reference_passes(files, kind: str) -> None:
    parquet, jsonl, cache = files
    path = parquet if kind == "parquet" else jsonl
    env = DeepCoderEnv(
        dataset="deepcoder",
        dataset_options={"data_files": str(path), "cache_dir": str(cache), "subset": "mixed"},
        backend="local",
        max_turns=2,
    )
    try:
        ids = env.task_ids()
        assert ids == [f"deepcoder/mixed/train/{i}" for i in range(len(ROWS))]
        for i, task_id in enumerate(ids):
            env.reset(seed=0, options={"task_id": task_id})
            task = env.task
            assert task.style == STYLES[i], task_id
            assert (task.reference is None) == (i in EXTRA_SOLUTIONS), task_id
            reference = task.reference or EXTRA_SOLUTIONS[i]
            assert env.score_action(f"```python\n{reference}```") == 1.0, task_id
            assert env.score_action("print('nope')\n") < 1.0
    finally:
        env.close()


def test_functional_shapes_become_json_argument_arrays() -> None:
    taco = dp.parse_tests(json.loads(ROWS[1]["tests"]))
    assert [(t.input, t.expected, t.fn_name) for t in taco] == [
        ("[[1, 2, 3]]", "6", "total"),
        ("[[]]", "0", "total"),
        ("[[-4]]", "-4", "total"),
    ]
    lcb = dp.parse_tests(json.loads(ROWS[4]["tests"]), {"func_name": "countAtLeast"})
    assert lcb[0].input == "[[5, 3, 10, 8, 2], 5]" and lcb[0].expected == "3"
    prime = dp.parse_tests(json.loads(ROWS[8]["tests"]))
    assert [(t.input, t.expected) for t in prime] == [("[3]", "9"), ("[-2]", "4")]


def test_functional_lcb_test_needs_a_function_name() -> None:
    with pytest.raises(ValueError, match="func_name"):
        dp.parse_tests([{"input": "1", "output": "1", "testtype": "functional"}])


def test_compressed_tests_decode_but_pickled_objects_are_refused() -> None:
    decoded = dp.decode_tests_column(ROWS[5]["tests"])
    assert decoded[0]["input"] == "abc\n"

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("pwned",))

    hostile = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(ValueError, match="refusing"):
        dp.decode_tests_column(hostile)


def test_listing_reads_no_tests_and_rows_stay_on_disk(files, monkeypatch) -> None:
    parquet, _, cache = files
    calls: list[int] = []
    real = dp.decode_tests_column

    def counting(value: Any) -> Any:
        calls.append(1)
        return real(value)

    monkeypatch.setattr(dp, "decode_tests_column", counting)
    source = dp.DeepCoderPreviewSource(data_files=[str(parquet)], cache_dir=str(cache), limit=4)
    assert len(source.task_ids()) == 4 and calls == []
    source.load("deepcoder/local/train/2")
    assert len(calls) == 1
    assert source._dataset.cache_files, "the Arrow table should be memory-mapped from disk"
    with pytest.raises(KeyError, match="no task"):
        source.load("deepcoder/local/train/4")  # beyond the limit


def test_max_tests_and_split_mapping(files) -> None:
    parquet, _, cache = files
    source = dp.DeepCoderPreviewSource(
        data_files={"test": [str(parquet)]}, split="test", cache_dir=str(cache), max_tests=1
    )
    task = source.load("deepcoder/local/test/0")
    assert len(task.tests) == 1 and "from typing import" in task.program_prefix


def test_hub_subset_is_checked_and_file_types_too(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="subset"):
        dp.DeepCoderPreviewSource(subset="apps")
    bad = dp.DeepCoderPreviewSource(data_files=[str(tmp_path / "x.csv")])
    with pytest.raises(ValueError, match="parquet"):
        bad.task_ids()


# ------------------------------------------------------------------ hostile data files (issue 29)
@pytest.mark.parametrize(
    "cell",
    [
        "[" * 100_000 + "]" * 100_000,  # MAX_CELL_DEPTH: refused before json.loads recurses
        json.dumps([{"input": "[" * 5000 + "]" * 5000, "output": "1", "testtype": "functional"}]),
        json.dumps({"inputs": ["[" * 5000 + "]" * 5000], "outputs": ["1"], "fn_name": "f"}),
    ],
)
def test_bound_a_deep_tests_cell_is_a_value_error_not_recursion(cell: str) -> None:
    row = {"problem": "p", "tests": cell, "metadata": json.dumps({"func_name": "f"})}
    with pytest.raises(ValueError, match="nested"):
        dp.row_to_task(row, "deepcoder/local/train/0")


def test_bound_a_compressed_cell_inflates_at_most_max_cell_bytes() -> None:
    bomb = base64.b64encode(zlib.compress(b"\0" * (dp.MAX_CELL_BYTES + 1), 9)).decode()
    assert len(bomb) < 1_000_000  # a 256 MiB bomb in under a megabyte of text
    with pytest.raises(ValueError, match="inflates to over"):
        dp.decode_tests_column(bomb)


def test_bound_a_data_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    source = dp.DeepCoderPreviewSource(data_files=[str(fifo)], cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="FIFO"):
        source.task_ids()
