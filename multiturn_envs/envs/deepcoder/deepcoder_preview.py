"""Loader for the DeepCoder-Preview dataset schema (``agentica-org/DeepCoder-Preview-Dataset``).

Rows have the columns ``problem`` (str), ``tests`` (a JSON string), ``starter_code`` (``""`` for
stdin problems, else a stub such as ``class Solution: ...``), ``metadata`` (a JSON string with
``func_name`` for functional LiveCodeBench problems) and, in some copies, ``solutions``. The
``tests`` column has one shape per subset:

============== ================================================== ==============================
subset         ``tests``                                          functional when
============== ================================================== ==============================
taco           ``{"inputs": [...], "outputs": [...], "fn_name"?}`` ``fn_name`` is present: each
                                                                  input is an argument list and
                                                                  each output is wrapped
                                                                  (``[[true], ...]``)
lcbv5,         ``[{"input", "output", "testtype"}]``              ``testtype == "functional"``:
codeforces                                                        ``input`` is one JSON value
                                                                  per line (one per argument),
                                                                  ``output`` one JSON value;
                                                                  the name is
                                                                  ``metadata.func_name``
primeintellect ``[{"input", "output", "type", "fn_name"}]``       ``fn_name`` is not null; then
                                                                  treated like TACO (argument
                                                                  list, wrapped output)
============== ================================================== ==============================

The shape is detected per row, so a mixed file (rLLM's flattened copies) loads too. Everything
becomes :class:`~multiturn_envs.sandbox.base.TestCase` objects: stdin text and expected stdout,
or a JSON array of arguments and the JSON expected value.

Laziness: rows are read through ``datasets`` (hub name, or local parquet/JSONL files), whose
Arrow tables are memory-mapped; the task ids are row numbers, so listing them reads no tests,
and a problem's tests are decoded only when :meth:`DeepCoderPreviewSource.load` builds it for an
episode. LiveCodeBench's compressed private tests (base64 + zlib + pickle of a JSON string) are
decoded with an unpickler that refuses every class, so a hostile file cannot run code.

A data file is someone else's: each local file must be a regular file (a FIFO would hang
``datasets``), a compressed cell is inflated to at most :data:`MAX_CELL_BYTES`, and every JSON
cell is measured before it is parsed (:data:`MAX_CELL_BYTES`, :data:`MAX_CELL_DEPTH` levels), so
a hostile row is a ``ValueError`` naming it at the reset that loads it, never a
``RecursionError`` or a decompression bomb.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import zlib
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from multiturn_envs.envs.deepcoder.tasks import CodeTask, Style
from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.safejson import JSONLimitError, check_bounds
from multiturn_envs.sandbox.base import TestCase
from multiturn_envs.untrusted import open_regular

MAX_CELL_BYTES = 256 << 20
"""The largest ``tests`` cell, once inflated (LiveCodeBench's largest are tens of MB)."""
MAX_CELL_DEPTH = 64
"""The deepest JSON nesting of a cell (a test's arguments nest a few levels)."""


def _loads(text: str | bytes) -> Any:
    """``json.loads`` of a cell once it is within :data:`MAX_CELL_BYTES` and
    :data:`MAX_CELL_DEPTH` (an :class:`~multiturn_envs.errors.UntrustedInputError` otherwise);
    text that is not JSON raises ``json.JSONDecodeError`` as ``json.loads`` does."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        check_bounds(text, max_bytes=MAX_CELL_BYTES, max_depth=MAX_CELL_DEPTH)
    except JSONLimitError as exc:
        raise UntrustedInputError(f"a cell of the data file is refused: {exc}") from None
    return json.loads(text)


HUB_NAME = "agentica-org/DeepCoder-Preview-Dataset"
# LiveCodeBench's graders prepend imports (typing names for ``List[int]`` stubs, collections,
# itertools, ...). Same idea, standard library only; numpy/pandas only where installed.
BASE_IMPORTS = """\
import bisect, collections, copy, functools, heapq, itertools, math, operator, random, re
import string, sys
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, lru_cache, reduce
from heapq import heapify, heappop, heappush
from itertools import accumulate, combinations, groupby, permutations, product
from math import ceil, comb, floor, gcd, inf, isqrt, log, log2, sqrt
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Set, Tuple, Union
sys.setrecursionlimit(50000)
"""
SUBSETS: tuple[str, ...] = ("primeintellect", "taco", "lcbv5", "codeforces")


class _NoClassesUnpickler(pickle.Unpickler):
    """Unpickles plain data (str, bytes, numbers, lists, dicts) and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a tests column")


def decode_tests_column(value: Any) -> Any:
    """The ``tests`` cell as Python data (JSON text, decoded data, or LCB's compressed form)."""
    if not isinstance(value, str | bytes):
        return value
    text = value.decode("utf-8") if isinstance(value, bytes) else value
    try:
        return _loads(text)
    except json.JSONDecodeError:
        pass
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(text), MAX_CELL_BYTES + 1)
        if len(raw) > MAX_CELL_BYTES or inflate.unconsumed_tail:
            raise UntrustedInputError(
                f"the tests cell inflates to over {MAX_CELL_BYTES:,} bytes (refused)"
            )
        inner = _NoClassesUnpickler(io.BytesIO(raw)).load()
    except UntrustedInputError:
        raise
    except Exception as exc:
        raise ValueError(f"the tests cell is neither JSON nor LCB-compressed: {exc}") from exc
    return _loads(inner) if isinstance(inner, str | bytes) else inner


def _json_cell(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip():
        try:
            decoded = _loads(value)
        except json.JSONDecodeError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def _text(value: Any) -> str:
    """Stdin/stdout cells are strings, sometimes lists of lines."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def _args_json(value: Any) -> str:
    """A functional test's arguments as a JSON array."""
    if isinstance(value, str):
        try:
            value = _loads(value)
        except json.JSONDecodeError:
            return json.dumps([_loads(line) for line in value.splitlines() if line.strip()])
    return json.dumps(value if isinstance(value, list) else [value])


def _unwrapped_json(value: Any) -> str:
    """TACO-style expected output: ``[x]`` means ``x``."""
    if isinstance(value, str):
        try:
            value = _loads(value)
        except json.JSONDecodeError:
            return json.dumps(value)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return json.dumps(value)


def parse_tests(tests: Any, metadata: Mapping[str, Any] | None = None) -> list[TestCase]:
    """Convert one row's decoded ``tests`` (any subset's shape) into sandbox test cases."""
    metadata = metadata or {}
    if isinstance(tests, Mapping):  # TACO
        inputs, outputs = list(tests.get("inputs", [])), list(tests.get("outputs", []))
        if len(inputs) != len(outputs):
            raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
        fn_name = tests.get("fn_name")
        if fn_name:
            return [
                TestCase("functional", _args_json(i), _unwrapped_json(o), str(fn_name))
                for i, o in zip(inputs, outputs)
            ]
        return [TestCase("stdio", _text(i), _text(o)) for i, o in zip(inputs, outputs)]
    if not isinstance(tests, list):
        raise ValueError(f"unknown tests shape: {type(tests).__name__}")
    cases: list[TestCase] = []
    for t in tests:
        if not isinstance(t, Mapping):
            raise ValueError(f"a test is a {type(t).__name__}, not an object")
        if "testtype" in t:  # LiveCodeBench / Codeforces (and rLLM's flattened copies)
            meta = t.get("metadata") if isinstance(t.get("metadata"), Mapping) else metadata
            if t["testtype"] == "functional":
                fn_name = (meta or {}).get("func_name") or metadata.get("func_name")
                if not fn_name:
                    raise ValueError("a functional test without metadata.func_name")
                expected = json.dumps(_loads(t["output"]))
                cases.append(TestCase("functional", _args_json(t["input"]), expected, fn_name))
            else:
                cases.append(TestCase("stdio", _text(t["input"]), _text(t["output"])))
        else:  # PrimeIntellect
            fn_name = t.get("fn_name")
            if fn_name:
                cases.append(
                    TestCase(
                        "functional", _args_json(t["input"]), _unwrapped_json(t["output"]), fn_name
                    )
                )
            else:
                cases.append(TestCase("stdio", _text(t["input"]), _text(t["output"])))
    return cases


def _first_solution(value: Any) -> str | None:
    if isinstance(value, str):
        try:
            value = _loads(value)
        except (json.JSONDecodeError, UntrustedInputError):
            return value or None
    if isinstance(value, Sequence) and not isinstance(value, str):
        for v in value:
            if isinstance(v, str) and v.strip():
                return v
    return None


def row_to_task(
    row: Mapping[str, Any], task_id: str, max_tests: int | None = None, base_imports: bool = True
) -> CodeTask:
    """Build a :class:`CodeTask` from one dataset row (``base_imports``: LCB's import prelude)."""
    metadata = _json_cell(row.get("metadata"))
    tests = parse_tests(decode_tests_column(row["tests"]), metadata)
    if max_tests is not None:
        tests = tests[:max_tests]
    style: Style = "functional" if any(t.kind == "functional" for t in tests) else "stdio"
    fn_name = next((t.fn_name for t in tests if t.fn_name), None)
    return CodeTask(
        task_id=task_id,
        statement=str(row["problem"]).strip(),
        style=style,
        tests=tuple(tests),
        starter_code=str(row.get("starter_code") or ""),
        fn_name=fn_name,
        reference=_first_solution(row.get("solutions")),
        program_prefix=BASE_IMPORTS if base_imports else "",
        source="deepcoder",
        metadata={k: v for k, v in metadata.items() if isinstance(v, str | int | float | bool)},
    )


def _builder_for(files: Sequence[str]) -> str:
    for name in files:  # a FIFO or a device would hang datasets' reader (a pattern is its)
        if os.path.lexists(name):
            os.close(open_regular(name))
    suffixes = {Path(f).suffix.lower() for f in files}
    if suffixes <= {".parquet"}:
        return "parquet"
    if suffixes <= {".jsonl", ".json"}:
        return "json"
    raise ValueError(f"data_files must all be .parquet or all .jsonl/.json, got {sorted(suffixes)}")


class DeepCoderPreviewSource:
    """DeepCoder-Preview problems, from the hub name or from local parquet/JSONL files.

    Args:
        subset: the dataset config (``primeintellect``, ``taco``, ``lcbv5``, ``codeforces``);
            used with the hub name, and as part of the task ids.
        split: ``"train"`` or ``"test"`` (with local files given as a list, their one split).
        data_files: local parquet or JSONL file(s) in the dataset's schema (a path, a list,
            or ``{split: paths}``); ``None`` loads ``path`` through ``datasets``.
        path: the dataset name (default: the DeepCoder-Preview hub name).
        cache_dir: ``datasets``' cache directory (``None``: its default).
        limit: keep only the first ``limit`` rows.
        max_tests: keep only the first ``max_tests`` tests of each problem (``None``: all, the
            exact oracle).
        base_imports: run submissions after :data:`BASE_IMPORTS` (as LiveCodeBench's grader
            does), so that stubs such as ``def f(self, nums: List[int])`` work unimported.
    """

    name = "deepcoder"

    def __init__(
        self,
        subset: str | None = None,
        split: str = "train",
        data_files: str | Sequence[str] | Mapping[str, Any] | None = None,
        path: str = HUB_NAME,
        cache_dir: str | None = None,
        limit: int | None = None,
        max_tests: int | None = None,
        base_imports: bool = True,
    ) -> None:
        if data_files is None and subset not in SUBSETS:
            raise ValueError(
                f"subset must be one of {SUBSETS} with the hub dataset, got {subset!r}"
            )
        self.subset = subset
        self.split = split
        self.data_files = data_files
        self.path = path
        self.cache_dir = cache_dir
        self.limit = limit
        self.max_tests = max_tests
        self.base_imports = base_imports
        self._prefix = f"deepcoder/{subset or 'local'}/{split}"

    @cached_property
    def _dataset(self) -> Any:
        try:
            import datasets
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "dataset='deepcoder' needs the 'datasets' package "
                "(pip install 'multiturn-envs[data]')"
            ) from exc
        if self.data_files is None:
            return datasets.load_dataset(
                self.path, name=self.subset, split=self.split, cache_dir=self.cache_dir
            )
        files = self.data_files
        if isinstance(files, Mapping):
            flat = [str(f) for v in files.values() for f in ([v] if isinstance(v, str) else v)]
            split = self.split
            data_files: Any = {k: v for k, v in files.items()}
        else:
            flat = [str(files)] if isinstance(files, str | Path) else [str(f) for f in files]
            split = "train"  # datasets names a plain list of files "train"
            data_files = flat
        return datasets.load_dataset(
            _builder_for(flat), data_files=data_files, split=split, cache_dir=self.cache_dir
        )

    def __len__(self) -> int:
        n = len(self._dataset)
        return n if self.limit is None else min(n, self.limit)

    def task_ids(self) -> Sequence[str]:
        return [f"{self._prefix}/{i}" for i in range(len(self))]

    def load(self, task_id: str) -> CodeTask:
        prefix, _, index = task_id.rpartition("/")
        if prefix != self._prefix or not index.isdigit() or int(index) >= len(self):
            raise KeyError(f"no task {task_id!r} in {self._prefix} ({len(self)} rows)")
        row = self._dataset[int(index)]
        return row_to_task(row, task_id, self.max_tests, self.base_imports)
