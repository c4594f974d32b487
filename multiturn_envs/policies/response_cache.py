"""A response cache for LLM policies: one SQLite file on disk, off by default.

An LLM call is the expensive part of an evaluation; a rerun of the same run, or a resumed one
whose process died mid-turn, asks the same questions again. With a cache, a question asked
before is answered from disk: no tokens paid, and the same reply, so the rerun writes the same
records. The backends (transformers, vLLM, an OpenAI-compatible server) look up a reply by a
key of everything that determines it, and store what the model answered:

* **the model and its revision** (:func:`folder_revision` for a local folder, a hub commit, or
  what the user names with ``revision=``): a retrained checkpoint is another model;
* **what the model reads**: the prompt token ids of the offline backends (rendered from the
  messages and tools by the model's chat template, so a template change is a miss), the request
  body of an HTTP server (model id, messages, tools, tool choice);
* **the sampling parameters and the seed** (and ``n``, the replies asked for).

The key is the SHA-256 of that, canonical JSON; the value is what the backend got back (the
offline backends' completions, the server's JSON answer), parsed again on a hit exactly as it
was the first time, so a hit goes through the same checks and the same episode bookkeeping
(the prompter's kept token ids) as a miss.

**Several processes** (Ray workers, two evaluations sharing one cache) may read and write one
file at once: SQLite's write-ahead log with a busy timeout serialises the writes, an insert of a
key that is already there keeps the first value (both came from the same question), and no
process ever holds a transaction across a model call.

**Bounds**: at most ``max_entries`` entries and ``max_bytes`` bytes of values; past either,
the least recently used entries are dropped. A value over ``max_entry_bytes`` is not kept
(it is answered again next time). A value read back that is not what the cache wrote (a
damaged file) is a miss, not a crash.

**A file the cache did not make is never changed.** The cache creates its file (exclusively)
or opens one whose ``mte_response_cache`` table says it is one; anything else (a text file, a
foreign SQLite database, a damaged file, a FIFO, a directory) is a
:class:`~multiturn_envs.errors.UntrustedInputError` naming the file, before a byte is written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.policies.prompting import ChatPrompter, Completion
from multiturn_envs.policies.sampling import Sampling, sample_seed_base
from multiturn_envs.untrusted import open_regular

if TYPE_CHECKING:
    from multiturn_envs.policies.base import Reply, TurnRequest

__all__ = [
    "CACHE_FORMAT",
    "OfflineBackend",
    "ResponseCache",
    "cached_completions",
    "cached_replies",
    "folder_revision",
    "open_cache",
]

CACHE_FORMAT = "multiturn-envs response cache"
"""What the ``mte_response_cache`` table's ``format`` row holds in a file this module made."""
_VERSION = 1
_INIT_WAIT_S = 10.0
"""How long an open waits for another process that has just created the file to set it up."""
MAX_REVISION_FILES = 10_000
"""The most files :func:`folder_revision` looks at (a model folder has a few dozen)."""


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "backslashreplace"
    )


def folder_revision(path: str | os.PathLike[str]) -> str:
    """A revision of a local model folder or file: a hash of its files' names, sizes and
    modification times (a retrained or replaced checkpoint is a new revision; reading every
    weight byte to hash it would cost more than the calls it saves)."""
    root = Path(path)
    entries: list[tuple[str, int, int]] = []
    if root.is_file():
        st = root.stat()
        entries.append((root.name, st.st_size, st.st_mtime_ns))
    elif root.is_dir():
        for n, file in enumerate(sorted(root.rglob("*"))):
            if n >= MAX_REVISION_FILES:
                raise ValueError(f"{root}: more than {MAX_REVISION_FILES} files; name revision=")
            if file.is_file() and not file.is_symlink():
                st = file.stat()
                entries.append((file.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    else:
        raise ValueError(f"{root}: no such model folder or file to take a revision of")
    return "files:" + hashlib.sha256(_canonical(entries)).hexdigest()[:24]


class ResponseCache:
    """Replies of LLM calls on disk (see the module docstring).

    Args:
        path: the SQLite file (created when missing; an existing one must be a cache).
        max_entries: the most entries kept (least recently used dropped first).
        max_bytes: the most bytes of values kept.
        max_entry_bytes: a value larger than this is not kept.
        busy_timeout_s: how long a write waits for another process's write.

    Thread-safe (one lock per object); :attr:`hits` and :attr:`misses` count this object's
    look-ups, :attr:`stored` its writes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_entries: int = 100_000,
        max_bytes: int = 1 << 30,
        max_entry_bytes: int = 16 << 20,
        busy_timeout_s: float = 60.0,
    ) -> None:
        if max_entries < 1 or max_bytes < 1 or max_entry_bytes < 1:
            raise ValueError("max_entries, max_bytes and max_entry_bytes must be >= 1")
        self.path = os.fspath(path)
        self.max_entries = int(max_entries)
        self.max_bytes = int(max_bytes)
        self.max_entry_bytes = int(max_entry_bytes)
        self.busy_timeout_s = float(busy_timeout_s)
        self.hits = self.misses = self.stored = 0
        self.disabled = False
        """Set when the file broke while in use: the cache then answers nothing."""
        self._lock = threading.Lock()
        self._conn = self._open()

    # ------------------------------------------------------------------ opening
    def _refuse(self, why: str) -> UntrustedInputError:
        return UntrustedInputError(
            f"{self.path}: {why}; it is left as it is (name another --cache file)"
        )

    def _open(self) -> sqlite3.Connection:
        path = self.path
        if os.path.isdir(path):
            raise self._refuse("a directory, not a response cache")
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        created = False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.close(fd)
            created = True
        except FileExistsError:
            try:  # a regular file (a FIFO would block SQLite's open; a link is not followed)
                os.close(open_regular(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)))
            except UntrustedInputError as exc:
                raise self._refuse(f"not a regular file ({exc})") from None
        conn = sqlite3.connect(
            path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            if created:
                self._initialise(conn)
            else:
                self._check(conn)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    def _initialise(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE mte_response_cache (name TEXT PRIMARY KEY, value TEXT)")
        conn.execute(
            "CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
            "size INTEGER NOT NULL, used REAL NOT NULL)"
        )
        conn.execute("CREATE INDEX entries_used ON entries (used)")
        conn.executemany(
            "INSERT INTO mte_response_cache VALUES (?, ?)",
            [("format", CACHE_FORMAT), ("version", str(_VERSION))],
        )
        conn.execute("COMMIT")

    def _check(self, conn: sqlite3.Connection) -> None:
        """An existing file must be a cache: another process may be setting one up (an empty
        file, for a moment), anything else is refused before a byte is written."""
        deadline = time.monotonic() + _INIT_WAIT_S
        while True:
            try:
                rows = dict(conn.execute("SELECT name, value FROM mte_response_cache").fetchall())
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc) and "locked" not in str(exc):
                    raise self._refuse(f"not a response cache ({exc})") from None
                rows = None
            except sqlite3.DatabaseError as exc:
                raise self._refuse(f"not a response cache ({exc})") from None
            if rows is not None:
                if rows.get("format") != CACHE_FORMAT:
                    raise self._refuse("a SQLite file, but not a response cache of this package")
                if rows.get("version") != str(_VERSION):
                    raise self._refuse(
                        f"a response cache of version {rows.get('version')}, this package "
                        f"reads version {_VERSION}"
                    )
                return
            # no table yet: a file being set up by its creator (just now) is empty for a moment
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise self._refuse("a SQLite file, but not a response cache of this package")
            fresh = time.time() - os.path.getmtime(self.path) < _INIT_WAIT_S
            if not fresh or time.monotonic() > deadline:
                raise self._refuse("an empty file that no response cache set up")
            time.sleep(0.05)

    # ------------------------------------------------------------------ keys and values
    @staticmethod
    def key(identity: Mapping[str, Any], question: Mapping[str, Any]) -> str:
        """The key of ``question`` (what the model reads, sampling, seed) asked of the model
        ``identity`` (engine, model, revision): a SHA-256 of their canonical JSON."""
        return hashlib.sha256(
            _canonical({"model": dict(identity), "question": dict(question)})
        ).hexdigest()

    def _damaged(self, exc: sqlite3.DatabaseError) -> None:
        """The file broke while in use (cut short, overwritten): warn once and go on without
        the cache (every call is then answered by the model), never fail the run for it."""
        if not self.disabled:
            self.disabled = True
            print(
                f"warning: the response cache {self.path} is damaged ({exc}); going on without "
                "it (delete the file to start a new cache)",
                file=sys.stderr,
            )

    def get(self, key: str) -> Any | None:
        """The value stored under ``key`` (parsed JSON), or ``None`` (a miss)."""
        with self._lock:
            if self.disabled:
                self.misses += 1
                return None
            try:
                row = self._conn.execute(
                    "SELECT value FROM entries WHERE key = ?", (key,)
                ).fetchone()
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as exc:
                self._damaged(exc)
                self.misses += 1
                return None
            if row is None:
                self.misses += 1
                return None
            try:
                value = json.loads(bytes(row[0]).decode("utf-8"))
            except (ValueError, TypeError, RecursionError):
                self.misses += 1  # damaged: answered again, and the entry replaced
                with contextlib.suppress(sqlite3.OperationalError):
                    self._conn.execute("DELETE FROM entries WHERE key = ?", (key,))
                return None
            with contextlib.suppress(sqlite3.OperationalError):  # a busy writer: keep going
                self._conn.execute("UPDATE entries SET used = ? WHERE key = ?", (time.time(), key))
            self.hits += 1
            return value

    def put(self, key: str, value: Any) -> bool:
        """Store ``value`` (JSON-able) under ``key``; whether it was kept (too large: not)."""
        data = _canonical(value)
        if len(data) > self.max_entry_bytes:
            return False
        with self._lock:
            if self.disabled:
                return False
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        "INSERT OR IGNORE INTO entries (key, value, size, used) "
                        "VALUES (?, ?, ?, ?)",
                        (key, data, len(data), time.time()),
                    )
                    self._evict(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as exc:
                self._damaged(exc)
                return False
            self.stored += 1
        return True

    def _evict(self, conn: sqlite3.Connection) -> None:
        count, total = conn.execute(
            "SELECT count(*), coalesce(sum(size), 0) FROM entries"
        ).fetchone()
        if count <= self.max_entries and total <= self.max_bytes:
            return
        drop_count = max(0, count - self.max_entries)
        rows = conn.execute("SELECT key, size FROM entries ORDER BY used, key").fetchall()
        doomed: list[str] = []
        for n, (key, size) in enumerate(rows):
            if n >= drop_count and total <= self.max_bytes:
                break
            doomed.append(key)
            total -= size
        conn.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in doomed])

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM entries").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        """A cache travels (to a Ray worker) as its path and bounds, and opens there."""
        return {
            "path": self.path,
            "max_entries": self.max_entries,
            "max_bytes": self.max_bytes,
            "max_entry_bytes": self.max_entry_bytes,
            "busy_timeout_s": self.busy_timeout_s,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        path = state.pop("path")
        self.__init__(path, **state)  # type: ignore[misc]


def open_cache(cache: ResponseCache | str | os.PathLike[str] | None) -> ResponseCache | None:
    """A backend's ``cache`` argument as a :class:`ResponseCache` (a path opens one)."""
    if cache is None or isinstance(cache, ResponseCache):
        return cache
    return ResponseCache(cache)


# ---------------------------------------------------------------------- the offline backends
def _completion_json(c: Completion) -> dict[str, Any]:
    return {
        "token_ids": list(c.token_ids),
        "logprobs": c.logprobs,
        "text": c.text,
        "finish_reason": c.finish_reason,
        "meta": c.meta,
    }


def _completions_of(value: Any, n: int) -> list[Completion] | None:
    """``n`` completions from a cached value, or ``None`` when it is not what was stored."""
    if not isinstance(value, list) or len(value) != n:
        return None
    out = []
    for item in value:
        if not isinstance(item, dict):
            return None
        ids, logprobs = item.get("token_ids"), item.get("logprobs")
        text, reason, meta = item.get("text"), item.get("finish_reason"), item.get("meta")
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            return None
        if logprobs is not None and (
            not isinstance(logprobs, list)
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in logprobs)
        ):
            return None
        if not isinstance(text, str) or not isinstance(reason, str) or not isinstance(meta, dict):
            return None
        out.append(
            Completion(
                ids, None if logprobs is None else [float(x) for x in logprobs], text, reason, meta
            )
        )
    return out


def cached_completions(
    cache: ResponseCache | None,
    identity: Mapping[str, Any],
    questions: Sequence[Mapping[str, Any]],
    n: int,
    generate: Callable[[list[int]], list[list[Completion]]],
) -> list[list[Completion]]:
    """``n`` completions per question, from ``cache`` where it holds them, the others from
    ``generate(indices of the misses)`` (one call, in the order given) and then stored.

    Each question is what the model reads plus the sampling and the seed (the offline
    backends: prompt token ids, :class:`~.sampling.Sampling`, the seed base, ``n``).
    """
    if cache is None:
        return generate(list(range(len(questions))))
    keys = [cache.key(identity, {**q, "n": n}) for q in questions]
    groups: list[list[Completion] | None] = [_completions_of(cache.get(k), n) for k in keys]
    misses = [j for j, g in enumerate(groups) if g is None]
    if misses:
        for j, group in zip(misses, generate(misses)):
            groups[j] = group
            cache.put(keys[j], [_completion_json(c) for c in group])
    return [g for g in groups if g is not None]


class OfflineBackend(Protocol):
    """What :func:`cached_replies` needs of a backend that runs the model itself."""

    prompter: ChatPrompter
    sampling: Sampling
    cache: ResponseCache | None

    def cache_identity(self) -> dict[str, Any]: ...


def cached_replies(
    backend: OfflineBackend,
    requests: Sequence[TurnRequest],
    n: int,
    keep: bool,
    generate: Callable[[list[list[int]], list[int]], list[list[Completion]]],
) -> list[list[Reply]]:
    """``n`` replies per request of an offline backend (transformers, vLLM): each request's
    prompt, its completions from the backend's cache where it holds them and the others from
    ``generate(prompt token ids, seed bases)`` (``n`` completions each, one call), finished by
    its prompter (``keep``: the prompter keeps the turn, with ``n == 1`` only)."""
    prompter, sampling = backend.prompter, backend.sampling
    if n < 1:
        raise ValueError("n must be >= 1")
    if not requests:
        return []
    prompts = [prompter.prompt(r) for r in requests]
    bases = [sample_seed_base(r.seed) for r in requests]
    questions = [
        {"prompt_ids": p.token_ids, "sampling": asdict(sampling), "seed": b}
        for p, b in zip(prompts, bases)
    ]
    groups = cached_completions(
        backend.cache,
        backend.cache_identity(),
        questions,
        n,
        lambda todo: generate([prompts[j].token_ids for j in todo], [bases[j] for j in todo]),
    )
    return [
        [prompter.finish(request, prompt, c, keep=keep and n == 1) for c in group]
        for request, prompt, group in zip(requests, prompts, groups)
    ]
