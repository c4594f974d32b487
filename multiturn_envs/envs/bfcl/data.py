"""BFCL entries: where they come from, what they hold, and which data version they are.

Three sources share BFCL's file layout (``BFCL_v4_<category>.json`` questions,
``possible_answer/BFCL_v4_<category>.json`` answers, ``multi_turn_func_doc/<module>.json``
function docs; every ``.json`` is JSON Lines):

* ``"bfcl-eval"``: the data files of the installed ``bfcl-eval`` package, read with
  ``importlib.resources`` (none of its modules is imported here);
* ``"bundled"``: the small set this project wrote (our own two backends, >= 30 multi-turn and
  >= 40 single-turn entries), so everything runs without ``bfcl-eval``;
* a directory path with the same layout (a BFCL checkout, a mirror).

``"auto"`` means ``bfcl-eval`` when it is installed, else ``bundled``. Every loaded entry carries
the data version (``bfcl-eval==<version>``, ``bundled-<n>`` or ``local:<digest>``) so that
records say which data produced them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

from multiturn_envs.envs.bfcl.backends import BACKENDS
from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.untrusted import Folder, open_regular, parse_json

MAX_DATA_BYTES = 4 << 30
"""A local BFCL data folder, hashed for its version (streamed, never held)."""

MULTI_TURN_CATEGORIES: tuple[str, ...] = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
SINGLE_TURN_CATEGORIES: tuple[str, ...] = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
)
"""Python-language AST categories. simple_java / simple_javascript are not supported (their
values are Java/JS source strings converted by BFCL's type converters)."""

CATEGORY_GROUPS: dict[str, tuple[str, ...]] = {
    "multi_turn": MULTI_TURN_CATEGORIES,
    "single_turn": SINGLE_TURN_CATEGORIES,
    "all": MULTI_TURN_CATEGORIES + SINGLE_TURN_CATEGORIES,
}
NO_ANSWER_CATEGORIES = frozenset({"irrelevance", "live_irrelevance", "live_relevance"})
BUNDLED_DATA_VERSION = "bundled-1"
MISSED_FUNCTION_PROMPT = "I have updated some more functions you can choose from. What about now?"


@dataclass(frozen=True)
class MultiTurnEntry:
    """A multi-turn entry: user turns, backends' initial state, ground-truth calls per turn."""

    id: str
    category: str
    question: list[list[dict[str, str]]]
    initial_config: dict[str, Any]
    involved_classes: list[str]
    ground_truth: list[list[str]]
    missed_function: dict[str, list[str]] = field(default_factory=dict)
    data_version: str = ""

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category or "composite" in self.category


@dataclass(frozen=True)
class SingleTurnEntry:
    """A single-turn AST entry: one user turn, function docs, allowed answers (or none)."""

    id: str
    category: str
    question: list[list[dict[str, str]]]
    functions: list[dict[str, Any]]
    ground_truth: list[dict[str, Any]] | None
    data_version: str = ""


Entry = MultiTurnEntry | SingleTurnEntry


def expand_categories(category: str | Sequence[str]) -> tuple[str, ...]:
    """``"multi_turn"``, ``"all"``, one category or a list of them -> category names."""
    names = [category] if isinstance(category, str) else list(category)
    out: list[str] = []
    for name in names:
        for cat in CATEGORY_GROUPS.get(name, (name,)):
            if cat not in CATEGORY_GROUPS["all"]:
                raise ValueError(
                    f"unknown BFCL category {cat!r}; choose from {CATEGORY_GROUPS['all']} "
                    f"or a group {tuple(CATEGORY_GROUPS)}"
                )
            if cat not in out:
                out.append(cat)
    return tuple(out)


def bfcl_eval_available() -> bool:
    """Whether the ``bfcl-eval`` package (its data files) is installed."""
    try:
        importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def bundled_data_dir() -> Path:
    return Path(str(importlib.resources.files("multiturn_envs.envs.bfcl") / "bundled" / "data"))


def resolve_source(source: str) -> tuple[Path, str]:
    """``source`` -> (data directory, data version)."""
    return _resolve_cached(source)


@lru_cache(maxsize=16)
def _resolve_cached(source: str) -> tuple[Path, str]:
    if source == "auto":
        source = "bfcl-eval" if bfcl_eval_available() else "bundled"
    if source == "bundled":
        return bundled_data_dir(), BUNDLED_DATA_VERSION
    if source == "bfcl-eval":
        if not bfcl_eval_available():
            raise ModuleNotFoundError(
                "source='bfcl-eval' needs the bfcl-eval package: "
                "pip install --no-deps bfcl-eval==2026.3.23 mpmath==1.3.0"
            )
        root = Path(str(importlib.resources.files("bfcl_eval") / "data"))
        return root, f"bfcl-eval=={importlib.metadata.version('bfcl-eval')}"
    path = Path(source).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"BFCL data directory {str(path)!r} does not exist")
    return path, f"local:{_digest_dir(path)}"


def load_entries(source: str, categories: Sequence[str]) -> list[Entry]:
    """Every entry of ``categories`` from ``source`` (categories the source lacks are skipped)."""
    root, version = resolve_source(source)
    return list(_load_cached(str(root), version, tuple(categories)))


@lru_cache(maxsize=16)
def _load_cached(root: str, version: str, categories: tuple[str, ...]) -> tuple[Entry, ...]:
    """Parsed entries, cached per process: entries are frozen and never mutated by episodes.

    The data folder may be anyone's (``source`` a local directory): it is read through
    :class:`~multiturn_envs.untrusted.Folder` (no link out of it, regular files only), each
    line within :data:`MAX_LINE_BYTES` and 64 levels, and a row without the fields an entry
    needs is a ``ValueError`` naming its file and line."""
    files = Folder(root)
    entries: list[Entry] = []
    for category in categories:
        question_file = f"BFCL_v4_{category}.json"
        if not files.is_file(question_file):
            continue
        answers = {}
        answer_file = f"possible_answer/BFCL_v4_{category}.json"
        if files.is_file(answer_file):
            for where, row in _rows(files, answer_file):
                try:
                    answers[row["id"]] = row["ground_truth"]
                except (KeyError, TypeError) as exc:
                    raise UntrustedInputError(f"{where}: no {exc} field") from None
        for where, row in _rows(files, question_file):
            try:
                entries.append(_entry(row, category, answers, version))
            except (KeyError, TypeError) as exc:
                raise UntrustedInputError(f"{where}: not a BFCL entry ({exc!r})") from None
    return tuple(entries)


def _entry(row: dict[str, Any], category: str, answers: dict[str, Any], version: str) -> Entry:
    if category in MULTI_TURN_CATEGORIES:
        return MultiTurnEntry(
            id=row["id"],
            category=category,
            question=row["question"],
            initial_config=row.get("initial_config", {}),
            involved_classes=list(row["involved_classes"]),
            ground_truth=answers[row["id"]],
            missed_function=dict(row.get("missed_function", {})),
            data_version=version,
        )
    if category not in NO_ANSWER_CATEGORIES and row["id"] not in answers:
        raise ValueError(f"BFCL entry {row['id']} has no possible answer")
    return SingleTurnEntry(
        id=row["id"],
        category=category,
        question=row["question"],
        functions=list(row["function"]),
        ground_truth=answers.get(row["id"]),
        data_version=version,
    )


MAX_LINE_BYTES = 64 << 20
"""The longest line of a BFCL data file (its long-context entries are a few MB)."""


def _lines(handle: IO[bytes], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for each non-blank line of an open JSON Lines file, each line within
    :data:`MAX_LINE_BYTES` and 64 levels of nesting, and a JSON object."""
    number = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        here = f"{where}: line {number}"
        if len(raw) > MAX_LINE_BYTES:
            raise UntrustedInputError(f"{here}: over {MAX_LINE_BYTES:,} bytes")
        if not raw.strip():
            continue
        row = parse_json(raw, where=here)
        if not isinstance(row, dict):
            raise UntrustedInputError(f"{here}: not a JSON object")
        yield here, row


def _rows(files: Folder, rel: str) -> Iterator[tuple[str, dict[str, Any]]]:
    with files.open(rel) as handle:
        yield from _lines(handle, files.name(rel))


def read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    """Rows of a BFCL ``.json`` file (JSON Lines, whatever the extension says), read within
    bounds (see :func:`_lines`; a FIFO is refused without blocking)."""
    with os.fdopen(open_regular(path), "rb") as handle:
        for _, row in _lines(handle, str(path)):
            yield row


@lru_cache(maxsize=64)
def _docs_cached(root: str, class_name: str) -> tuple[dict[str, Any], ...]:
    doc_file = f"multi_turn_func_doc/{BACKENDS[class_name].doc_file}"
    for base in (Folder(root), Folder(bundled_data_dir())):
        if base.is_file(doc_file):
            return tuple(row for _, row in _rows(base, doc_file))
    raise FileNotFoundError(f"no function docs for backend {class_name} ({doc_file})")


def function_docs(source: str, class_name: str) -> list[dict[str, Any]]:
    """The function docs of one backend class (the source's own, else the bundled ones)."""
    root, _ = resolve_source(source)
    return [json.loads(json.dumps(doc)) for doc in _docs_cached(str(root), class_name)]


def _digest_dir(path: Path) -> str:
    """A hash of the folder's ``*.json`` files (names and bytes), read through
    :class:`~multiturn_envs.untrusted.Folder` (streamed, links resolved inside it only)."""
    files = Folder(path)
    digest = hashlib.sha256()
    for entry, stream in files.stream_tree(max_total_bytes=MAX_DATA_BYTES):
        if not entry.path.endswith(".json") or entry.kind == "dir":
            continue
        digest.update(entry.path.encode())
        with stream if stream is not None else files.open(entry.path) as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]
