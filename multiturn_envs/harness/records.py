"""Trajectory records: the versioned JSONL schema, a crash-safe writer, a tolerant reader, resume.

A record file is JSON Lines. Line 1 is the run header (``"kind": "header"``): the config that
determines every record (env, policy, tasks, samples, budget, seeds), so ``report`` knows what
ran and a resume can refuse a file written by a different run. Every other line is one finished
trajectory (``"kind": "trajectory"``). docs/harness.md lists every field.

Crash safety (resume after ``kill -9``): each record is one complete ``write(2)`` of one line on
an ``O_APPEND`` descriptor, so a killed process leaves whole lines in the OS page cache, plus at
most one torn last line. ``fsync`` runs at most every ``fsync_interval_s`` seconds and at close:
it bounds what a *machine* crash can lose without paying a disk flush per trajectory. The
interval flushes run on a background thread (``fsync`` releases the GIL; a flush costs 10-40 ms
on a loaded disk, as much as a few hundred FrozenLake steps), the one at close runs inline, so
``close`` returns only once everything written is on disk. The header is not flushed on its
own: a file cut short by a machine crash before the first flush is empty or torn, and resume
treats both as a fresh start. On resume the torn tail (anything after the last newline) is cut
off, and the keys of the finished trajectories are skipped, so nothing is lost and nothing is
duplicated.

Reading is bounded, since anyone may hand ``report`` a file: a line longer than
:data:`MAX_LINE_BYTES` or nested deeper than :data:`MAX_RECORD_DEPTH` is a
:class:`RecordFileError` naming the file and the line, found before the line is parsed (and
without reading more than the bound into memory); so are a line that is not JSON, a header
whose config has fields of the wrong type, and a trajectory whose key or outcome fields do.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import threading
import time
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, TypedDict, cast

from multiturn_envs.errors import RecordFileError, RunMismatch, UntrustedInputError
from multiturn_envs.harness.run_config import (
    READABLE_SCHEMAS,
    SCHEMA_VERSION,
    EvalConfig,
    RecordKey,
    RunConfig,
)
from multiturn_envs.policies.base import TurnTokens
from multiturn_envs.safejson import JSONLimitError, loads_bounded
from multiturn_envs.untrusted import open_regular
from multiturn_envs.version import __version__

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

MAX_LINE_BYTES = 64 << 20
"""The longest line a record file may hold. A trajectory of 40,000-token replies over 50 turns,
with their token ids, is ~10 MB; a longer line is refused without being read whole."""
MAX_RECORD_DEPTH = 64
"""The deepest JSON nesting of a record line (a record nests 4 deep; ``env_kwargs`` a few more)."""

__all__ = [
    "ErrorInjectionInfo",
    "MemoryWriter",
    "RecordWriter",
    "RunFile",
    "RunHeader",
    "Timings",
    "TrajectoryRecord",
    "in_task_order",
    "iter_lines",
    "read_header",
    "read_run",
    "record_key",
]


# ------------------------------------------------------------------------------ the schema
class RunHeader(TypedDict):
    """Line 1 of a record file."""

    schema: int
    kind: str  # "header"
    run_id: str
    config: RunConfig
    created: str
    package_version: str


class ErrorInjectionInfo(TypedDict):
    """What :class:`~multiturn_envs.wrappers.ErrorInjection` played before the policy's turns."""

    after_expert_steps: int
    injected_actions: list[str]
    error_action: str | None
    prefix_turns: int | None


class Timings(TypedDict):
    """Seconds, microsecond resolution: env reset, each env step, each policy batch, the episode."""

    reset_s: float
    env_step_s: list[float]
    policy_batch_s: list[float]
    wall_s: float


# ``return`` is a keyword, hence the functional form.
_TrajectoryFields = TypedDict(
    "_TrajectoryFields",
    {
        "schema": int,
        "kind": str,  # "trajectory"
        "run_id": str,
        "env_id": str,
        "env_spec": str | None,
        "policy": str,
        "task_id": str,
        "sample": int,
        "seed": int,
        "budget_mode": str,
        "max_turns": int,
        "turns": int,
        "success": bool,
        "first_success_turn": int | None,
        "terminated": bool,
        "truncated": bool,
        "truncation_reason": str | None,
        "return": float,
        "rewards": list[float],
        "step_scores": list[float | None],
        "actions": list[str],
        "parse_errors": list[bool],
        "action_logprobs": list[float | None] | None,
        "turn_tokens": list[TurnTokens | None] | None,
        "error_injection": ErrorInjectionInfo | None,
        "timings": Timings,
    },
)


class TrajectoryRecord(_TrajectoryFields, total=False):
    """One finished trajectory (docs/harness.md describes every field)."""

    agent_stopped: bool
    """The policy answered without a tool call where that ends the episode (not a turn); files
    written before tool-calling policies lack it (read it as False)."""
    prompt_tokens: list[int | None] | None
    """Per turn, the tokens of the prompt the policy read (``None``: the backend did not say;
    the whole list ``None``: no turn said). Schema 2; files of schema 1 lack it."""
    completion_tokens: list[int | None] | None
    """Per turn, the tokens the policy wrote (as ``prompt_tokens``)."""
    stop_tokens: list[int] | None
    """``[prompt, completion]`` tokens of the reply that stopped the episode without a tool
    call (``agent_stopped``: paid for, but no turn, so in no list above); ``None`` otherwise or
    when the backend did not say. Schema 2."""


# What every trajectory line must hold: its key (files of schema 1, from any version of this
# package, have every field of TrajectoryRecord; the analyses check what they read, so that a
# hand-made file of keys and outcomes still reports).
_REQUIRED: dict[str, type] = {"task_id": str, "sample": int, "max_turns": int}
# Fields the analyses read, checked when present: name -> (types, what to say).
_OPTIONAL: dict[str, tuple[tuple[type, ...], str]] = {
    "first_success_turn": ((int, type(None)), "an int or null"),
    "success": ((bool,), "a bool"),
    "turns": ((int,), "an int"),
    "seed": ((int,), "an int"),
    "return": ((int, float), "a number"),
    "rewards": ((list,), "a list"),
    "actions": ((list,), "a list"),
    "step_scores": ((list,), "a list"),
    "parse_errors": ((list,), "a list"),
    "action_logprobs": ((list, type(None)), "a list or null"),
    "turn_tokens": ((list, type(None)), "a list or null"),
    "prompt_tokens": ((list, type(None)), "a list or null"),
    "completion_tokens": ((list, type(None)), "a list or null"),
    "stop_tokens": ((list, type(None)), "a list or null"),
}
# What a JSON value of each Python type is called in an error message (a config field of
# another type fails here, at import: add how JSON spells it; a float field must also take ints).
_JSON_NAMES: dict[type, str] = {
    str: "a string",
    int: "an int",
    bool: "a bool",
    list: "a list",
    dict: "an object",
}


def _json_check(hint: Any, expected: str | None) -> tuple[tuple[type, ...], str]:
    """The exact JSON types a value of type ``hint`` may have (its container type only:
    ``list[int] | None`` -> list or null), and their wording (``expected``, where given)."""
    args = typing.get_args(hint)
    nullable = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if nullable:
        (hint,) = [a for a in args if a is not type(None)]
    kind = typing.get_origin(hint) or hint
    kinds: tuple[type, ...] = (kind, type(None)) if nullable else (kind,)
    return kinds, expected or _JSON_NAMES[kind] + (" or null" if nullable else "")


def _config_checks() -> dict[str, tuple[tuple[type, ...], str]]:
    """The header's config checks, from :class:`EvalConfig`'s fields (the one definition):
    name -> (types, what to say). ``schema`` is checked on the header itself."""
    hints = typing.get_type_hints(EvalConfig)
    return {
        f.name: _json_check(hints[f.name], f.metadata.get("expected")) for f in fields(EvalConfig)
    }


_CONFIG = _config_checks()


_ABSENT = object()


def _check_fields(
    obj: Mapping[str, Any], fields: Mapping[str, tuple[tuple[type, ...], str]], where: str
) -> None:
    # exact types (what json gives: a bool is not an int here), one dict lookup per field
    for name, (kinds, wanted) in fields.items():
        value = obj.get(name, _ABSENT)
        if value is not _ABSENT and type(value) not in kinds:
            raise RecordFileError(f"{where}: {name!r} is {type(value).__name__}, expected {wanted}")


def check_trajectory(obj: Mapping[str, Any], where: str) -> TrajectoryRecord:
    """``obj`` as a :class:`TrajectoryRecord`, or a :class:`RecordFileError` naming ``where``
    and the first missing or mistyped field."""
    for name, kind in _REQUIRED.items():
        if name not in obj:
            raise RecordFileError(f"{where}: trajectory lacks {name!r}")
        value = obj[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise RecordFileError(
                f"{where}: {name!r} is {type(value).__name__}, expected {kind.__name__}"
            )
    _check_fields(obj, _OPTIONAL, where)
    actions, rewards = obj.get("actions"), obj.get("rewards")
    if isinstance(actions, list) and isinstance(rewards, list) and len(actions) != len(rewards):
        raise RecordFileError(f"{where}: {len(actions)} actions but {len(rewards)} rewards")
    for name in ("prompt_tokens", "completion_tokens"):
        counts = obj.get(name)
        if counts is None:
            continue
        if isinstance(actions, list) and len(counts) != len(actions):
            raise RecordFileError(f"{where}: {len(actions)} actions but {len(counts)} {name}")
        if not all(
            c is None or (type(c) is int and c >= 0)  # a bool is no count
            for c in counts
        ):
            raise RecordFileError(f"{where}: {name!r} holds a value that is no token count")
    stop = obj.get("stop_tokens")
    if stop is not None and (len(stop) != 2 or not all(type(c) is int and c >= 0 for c in stop)):
        raise RecordFileError(f"{where}: 'stop_tokens' is not [prompt, completion] token counts")
    return cast(TrajectoryRecord, obj)


def canonical(obj: Any) -> Any:
    """``obj`` as JSON would give it back (tuples become lists), for comparisons."""
    return json.loads(json.dumps(obj, sort_keys=True, ensure_ascii=False))


def run_id_of(config: Mapping[str, Any]) -> str:
    """A stable id of *what* ran: a hash of the canonical config (equal configs, equal ids)."""
    text = json.dumps(canonical(dict(config)), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def make_header(
    config: Mapping[str, Any], *, created: str | None = None, package_version: str = __version__
) -> RunHeader:
    """The header line of a run with ``config`` (``created`` defaults to now, UTC)."""
    stamp = created or datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {
        "schema": SCHEMA_VERSION,
        "kind": "header",
        "run_id": run_id_of(config),
        "config": cast(RunConfig, canonical(dict(config))),
        "created": stamp,
        "package_version": package_version,
    }


def record_key(record: Mapping[str, Any]) -> RecordKey:
    """The resume key of a trajectory record."""
    return (str(record["task_id"]), int(record["sample"]), int(record["max_turns"]))


# Built once: ``json.dumps`` with any non-default option constructs a new encoder per call,
# which costs a third of encoding a trajectory record. An encoder keeps no state between
# ``encode`` calls, so one shared instance is a constant, safe from several threads.
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps_line(obj: Mapping[str, Any]) -> bytes:
    """One JSON line, UTF-8, newline-terminated (lone surrogates escaped, not fatal)."""
    return (_LINE_ENCODER.encode(obj) + "\n").encode("utf-8", "backslashreplace")


def _torn_tail(fd: int, size: int) -> int:
    """Where the last complete line of the open file ends (bytes after it are a torn tail)."""
    pos = size
    block = 1 << 16
    while pos > 0:
        start = max(0, pos - block)
        chunk = os.pread(fd, pos - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0


def repair_truncated_tail(path: str | os.PathLike[str]) -> int:
    """Cut a torn last line (bytes after the last newline); return how many bytes were cut.

    It cuts whatever file it is given: the writer calls it only on a file whose header it has
    matched (:meth:`RecordWriter.open`); a caller with a file of unknown origin must not."""
    fd = _open_record_file(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        keep = _torn_tail(fd, size)
        if keep < size:
            os.ftruncate(fd, keep)
            os.fsync(fd)
        return size - keep
    finally:
        os.close(fd)


def _open_record_file(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """A descriptor of a record file (a regular file: a FIFO, socket, device or directory is
    refused without blocking), or a :class:`RecordFileError` that says why not."""
    try:
        return open_regular(path, flags)
    except UntrustedInputError as exc:
        if not os.path.lexists(path):  # missing: what callers (the CLI) already tell apart
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)) from None
        raise RecordFileError(str(exc)) from None


def _lines(
    fh: IO[bytes], path: str | os.PathLike[str], *, lineno: int = 0, tolerate_torn_tail: bool
) -> Iterator[dict[str, Any]]:
    """The parsed lines of an open record file from its position (see :func:`iter_lines`)."""
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            raise RecordFileError(
                f"{path}: line {lineno} is over {MAX_LINE_BYTES:,} bytes, longer than any "
                "record line (not a record file, or a damaged one)"
            )
        if not raw.endswith(b"\n"):
            if tolerate_torn_tail:
                return
            raise RecordFileError(f"{path}: line {lineno} is truncated")
        try:
            obj = loads_bounded(raw, max_bytes=MAX_LINE_BYTES, max_depth=MAX_RECORD_DEPTH)
        except JSONLimitError as exc:
            raise RecordFileError(f"{path}: line {lineno} is refused: {exc}") from None
        except (ValueError, RecursionError):
            raise RecordFileError(f"{path}: line {lineno} is not valid JSON") from None
        if not isinstance(obj, dict):
            raise RecordFileError(f"{path}: line {lineno} is not a JSON object")
        yield obj


def iter_lines(
    path: str | os.PathLike[str], *, tolerate_torn_tail: bool = True
) -> Iterator[dict[str, Any]]:
    """Parsed lines of a record file, streamed. A torn last line is skipped (a run killed or
    still writing); a bad line elsewhere is a :class:`RecordFileError` naming the line: not
    JSON, not an object, longer than :data:`MAX_LINE_BYTES` (not read further) or nested
    deeper than :data:`MAX_RECORD_DEPTH` (not parsed). A path that is not a regular file (a
    FIFO, a directory) is refused without blocking."""
    with os.fdopen(_open_record_file(path), "rb") as fh:
        yield from _lines(fh, path, tolerate_torn_tail=tolerate_torn_tail)


def _check_header(obj: Mapping[str, Any], path: str | os.PathLike[str]) -> RunHeader:
    """``obj`` (a file's first line) as a :class:`RunHeader`, or why it is none."""
    if obj.get("kind") != "header":
        raise RecordFileError(f"{path}: not a multiturn-envs record file (no header line)")
    if obj.get("schema") not in READABLE_SCHEMAS:
        readable = ", ".join(str(v) for v in READABLE_SCHEMAS)
        raise RecordFileError(
            f"{path}: record schema {obj.get('schema')!r}, this version reads {readable}"
        )
    if not isinstance(obj.get("config"), dict):
        raise RecordFileError(f"{path}: the header line has no 'config' object")
    _check_fields(obj["config"], _CONFIG, f"{path}: the header's config")
    tasks = obj["config"].get("tasks", [])
    if not all(isinstance(t, str) for t in tasks):
        raise RecordFileError(f"{path}: the header's config lists a task id that is no string")
    return cast(RunHeader, obj)


def read_header(path: str | os.PathLike[str]) -> RunHeader:
    """The header line of a record file, or a clear :class:`RecordFileError`."""
    for obj in iter_lines(path):
        return _check_header(obj, path)
    raise RecordFileError(f"{path}: not a multiturn-envs record file (no header line)")


@dataclass
class RunFile:
    """A record file read into memory: its header and its trajectories (first copy per key)."""

    path: str
    header: RunHeader
    records: list[TrajectoryRecord]
    duplicates: int = 0

    @property
    def config(self) -> RunConfig:
        return self.header["config"]


def read_run(path: str | os.PathLike[str]) -> RunFile:
    """Read a whole record file (for reports and analyses; the runner never calls this)."""
    header = read_header(path)
    seen: set[RecordKey] = set()
    records: list[TrajectoryRecord] = []
    duplicates = 0
    for lineno, obj in enumerate(iter_lines(path), start=1):
        if obj.get("kind") != "trajectory":
            continue
        record = check_trajectory(obj, f"{path}: line {lineno}")
        key = record_key(record)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        records.append(record)
    return RunFile(str(path), header, records, duplicates)


def in_task_order(
    records: Iterable[TrajectoryRecord], tasks: Sequence[str]
) -> list[TrajectoryRecord]:
    """``records`` by task (in ``tasks``' order, unknown tasks last), sample, then budget.

    A record file's line order is schedule (an executor's shards, a resume), not meaning;
    analyses whose numbers follow a record's position (seeds, paired lists) take this order so
    that the same episodes give the same result however they were run.
    """
    order = {t: i for i, t in enumerate(tasks)}
    return sorted(
        records,
        key=lambda r: (order.get(r["task_id"], len(order)), int(r["sample"]), int(r["max_turns"])),
    )


def _config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    parts = []
    for key in keys:
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if a != b:
            a_text, b_text = json.dumps(a)[:60], json.dumps(b)[:60]
            parts.append(f"{key}: {a_text} in the file, {b_text} now")
    return "; ".join(parts[:3]) + ("; ..." if len(parts) > 3 else "")


@dataclass
class RecordWriter:
    """Appends trajectory records to a run's JSONL file; resumes an interrupted file.

    A file that exists is the user's data until it proves to be a record file: the writer
    writes only to a file it created or to one whose header line is a record header, and
    anything else (a JSON document, a text file, an empty file, a file with a torn or garbage
    first line, a directory, a symbolic link, a FIFO) is refused with a
    :class:`~multiturn_envs.errors.RecordFileError` before a byte is written, leaving it
    byte-identical. A torn tail is cut only from a file whose header matched this run's.

    Args:
        path: the ``.jsonl`` file.
        header: from :func:`make_header`.
        resume: if the file holds this run (its header's config equals ours), keep its
            records (each line checked) and expose their keys in :attr:`done`; another run's
            file is a :class:`~multiturn_envs.errors.RunMismatch`. ``False``: an existing
            record file is an error unless ``overwrite``.
        overwrite: start afresh in an existing *record* file (of this run or another); a
            file that is not one is still refused.
        fsync_interval_s: the longest time between two ``fsync`` calls while writing.
    """

    path: str | os.PathLike[str]
    header: RunHeader
    resume: bool = True
    overwrite: bool = False
    fsync_interval_s: float = 1.0
    done: set[RecordKey] = field(default_factory=set, init=False)
    repaired_bytes: int = field(default=0, init=False)
    _fd: int | None = field(default=None, init=False, repr=False)
    _last_sync: float = field(default=0.0, init=False, repr=False)
    _syncer: threading.Thread | None = field(default=None, init=False, repr=False)
    _sync_error: OSError | None = field(default=None, init=False, repr=False)

    def open(self) -> RecordWriter:
        """Create the file, or take up an existing one that is this run's (see the class
        docstring); anything else is refused before a byte is written."""
        path = Path(self.path)
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _O_NOFOLLOW | os.O_CLOEXEC
        try:
            self._fd = os.open(path, create, 0o644)
        except FileExistsError:
            self._fd, taken_up = self._take_up(path)
            if taken_up:
                self._last_sync = time.monotonic()
                return self
        except IsADirectoryError:
            raise RecordFileError(f"{path}: a directory, not a record file") from None
        # a fresh file: the header is flushed at once, so that a machine crash never leaves an
        # empty or torn first line (which resume refuses, as it would anyone's file)
        self._write(dumps_line(self.header))
        os.fsync(self._fd)
        self._last_sync = time.monotonic()
        return self

    def _take_up(self, path: Path) -> tuple[int, bool]:
        """An existing file's descriptor, open for appending, and whether it holds this run
        (its keys in :attr:`done`, a torn tail cut) or was emptied for a fresh start
        (``overwrite``: a record file of any run). Every refusal comes before a byte is
        written, and the writes go through the one descriptor checked (a swap of the path
        cannot redirect them)."""
        try:
            fd = open_regular(path, os.O_RDWR | os.O_APPEND | _O_NOFOLLOW)
        except UntrustedInputError as exc:
            if os.path.islink(path):
                raise RecordFileError(
                    f"{path}: a symbolic link; records are written to a file, not through a "
                    "link (name the file itself)"
                ) from None
            raise RecordFileError(f"{exc}; records are written to a regular file") from None
        try:
            with os.fdopen(os.dup(fd), "rb") as fh:
                first = list(itertools.islice(_lines(fh, path, tolerate_torn_tail=True), 1))
                if not first:
                    raise RecordFileError(
                        f"{path}: not a multiturn-envs record file (no complete header line); "
                        "it is left as it is: write to another file"
                    )
                old = _check_header(first[0], path)
                same = old.get("config") == self.header["config"]
                if self.overwrite:
                    os.ftruncate(fd, 0)  # a record file, of this run or another: start afresh
                    return fd, False
                if old.get("schema") != SCHEMA_VERSION:
                    raise RecordFileError(
                        f"{path} holds records of schema {old.get('schema')}, this version "
                        f"writes schema {SCHEMA_VERSION}: it still reads (report, export), but "
                        "is not appended to; write to another file, or overwrite it"
                    )
                if not same:
                    diff = _config_diff(old["config"], self.header["config"])
                    raise RunMismatch(
                        f"{path} holds a different run ({diff}); write to another file, or "
                        "overwrite it"
                    )
                if not self.resume:
                    raise RecordFileError(
                        f"{path} exists: resume it, overwrite it, or write to another file"
                    )
                lines = _lines(fh, path, lineno=1, tolerate_torn_tail=True)
                for lineno, obj in enumerate(lines, start=2):
                    if obj.get("kind") == "trajectory":
                        record = check_trajectory(obj, f"{path}: line {lineno}")
                        self.done.add(record_key(record))
            size = os.fstat(fd).st_size
            keep = _torn_tail(fd, size)  # our own file, its header matched: repair it
            if keep < size:
                os.ftruncate(fd, keep)
                os.fsync(fd)
                self.repaired_bytes = size - keep
            return fd, True
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "RecordWriter is not open"
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def write(self, record: TrajectoryRecord) -> None:
        """Append one finished trajectory (one line, one write)."""
        self._write(dumps_line(record))
        self.done.add(record_key(record))
        now = time.monotonic()
        if now - self._last_sync >= self.fsync_interval_s:
            self._last_sync = now
            self._sync_in_background()

    def _sync_in_background(self) -> None:
        """Start an ``fsync`` on a thread unless one is still running (it covers this write)."""
        if self._sync_error is not None:
            error, self._sync_error = self._sync_error, None
            raise error
        if self._syncer is not None and self._syncer.is_alive():
            return
        self._syncer = threading.Thread(
            target=self._sync, args=(self._fd,), name="records-fsync", daemon=True
        )
        self._syncer.start()

    def _sync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:  # raised by the next write or by close, in the caller's thread
            self._sync_error = exc

    def close(self) -> None:
        if self._fd is not None:
            try:
                if self._syncer is not None:
                    self._syncer.join()  # the descriptor must outlive its flush
                    self._syncer = None
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None
            if self._sync_error is not None:
                error, self._sync_error = self._sync_error, None
                raise error

    def __enter__(self) -> RecordWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryWriter(RecordWriter):
    """A :class:`RecordWriter` that keeps a run's records in memory (``run_eval`` without
    ``out``), for callers that want the trajectories, not a file.

    Each record is kept as a record file would give it back (its line, parsed again and checked
    as :func:`read_run` does), so the same run in memory and read back from its file gives equal
    records. Nothing to resume: every episode of the run is played.
    """

    def __init__(self, header: RunHeader) -> None:
        super().__init__(path="<memory>", header=header)
        self.records: list[TrajectoryRecord] = []

    def open(self) -> MemoryWriter:
        return self

    def write(self, record: TrajectoryRecord) -> None:
        obj = json.loads(dumps_line(record))
        self.records.append(check_trajectory(obj, "<memory>"))
        self.done.add(record_key(record))

    def close(self) -> None:
        return None
