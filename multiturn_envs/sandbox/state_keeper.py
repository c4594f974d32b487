"""The keeper: reads and fills an agent's box's writable directories from inside the box,
without a request to the engine per directory and step.

The engine's archive API (``get_archive``/``put_archive``) enters the box's mounts for every
call: about 35-80 ms each on a quiet 2-core machine, two or more per step of MT/Terminal-v0
(its state is read after every command, so the checker's verdict is exact). The keeper is
a long-lived process of the box, started by the warm pool BEFORE the agent's first command,
speaking a framed protocol on its own exec stream (the runner's keeper role,
:func:`multiturn_envs.sandbox.check_runner.keeper_main`): a read of every writable directory
costs one round trip and the tar's bytes.

Why the agent cannot make it lie: it runs as root with the box's file capabilities (to read
every file and restore every owner), from ``python3 -I`` of the read-only system with its code
sent on stdin (no file the agent could replace), and is not dumpable before it reads anything
of the agent's. An agent of another uid can neither signal it nor trace it nor open its pipes
through ``/proc``; a root agent (same uid, no ``CAP_SYS_PTRACE``) can kill it, nothing more.
It reads every file in full at every step, opening each entry relative to its directory
without following links: no time stamp, inotify event or fingerprint of the agent's stands in
for the contents (a ``touch -d`` or a write through ``mmap`` changes nothing of what it sees).

Any failure (it died, was killed, hung past :data:`READ_S`, answered an error or nonsense)
closes it for good, and the caller reads through the engine from then on (:class:`KeeperFailed`),
so the worst an agent can do is make its own episode slower.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from multiturn_envs.safejson import loads_bounded
from multiturn_envs.sandbox.archive_stream import ArchiveTooLarge, PathTooLong, TarGuard
from multiturn_envs.sandbox.checker import RUNNER_SOURCE
from multiturn_envs.sandbox.provider import Box, EngineGone, ProcessStream
from multiturn_envs.sandbox.trees import SPOOL_BYTES, State, StatePart

START_S = 20.0
"""How long the keeper may take to start (``python3`` and its imports, in the pool)."""
READ_S = 30.0
"""How long one read or put may take before the keeper is given up for the box."""
ANSWER_CAP = 1 << 16
"""An ``e`` frame (a JSON object) is never longer."""

_BOOT = (
    "import sys\n"
    "n = int(sys.stdin.buffer.readline(32))\n"
    "ns = {'__name__': 'mte_keeper'}\n"
    "exec(compile(sys.stdin.buffer.read(n), 'check_runner.py', 'exec'), ns)\n"
    "ns['keeper_main'](sys.argv[1:])\n"
)


class KeeperFailed(RuntimeError):
    """The keeper could not answer; it is closed, and the engine serves the caller."""


class StateKeeper:
    """One box's keeper (module docstring).

    Args:
        box: the agent's box, before any command of the agent's ran in it.
        writable: its writable directories (the only ones the keeper reads or fills).
        readable: directories whose small files :meth:`read_file` may read (the shell's
            saved state).
    """

    def __init__(self, box: Box, writable: Sequence[str], readable: Sequence[str] = ()) -> None:
        self.writable = tuple(writable)
        self.readable = tuple(readable)
        self.reads = 0
        self._pending = bytearray()
        self._stream: ProcessStream | None = box.process(
            ["python3", "-I", "-B", "-c", _BOOT, *self.writable, "--read", *self.readable],
            user="0:0",
            workdir="/",
            environment={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        source = RUNNER_SOURCE.read_bytes()
        try:
            self._stream.send(b"%d\n" % len(source) + source)
            answer = self._answer(time.monotonic() + START_S)
        except KeeperFailed:
            raise
        except EngineGone:
            self.close()
            raise
        except Exception as exc:
            self._fail(f"could not start: {type(exc).__name__}: {exc}")
        if answer.get("ready") is not True:
            self._fail(f"did not start: {answer}")

    @property
    def alive(self) -> bool:
        return self._stream is not None and not self._stream.closed

    # ------------------------------------------------------------------ the protocol
    def _fail(self, why: str) -> NoReturn:
        self.close()
        raise KeeperFailed(f"the state keeper {why}")

    def _frame(self, deadline: float) -> tuple[bytes, bytes]:
        """The next ``(kind, payload)`` from the keeper's stdout."""
        assert self._stream is not None
        while True:
            if len(self._pending) >= 5:
                size = int.from_bytes(self._pending[1:5], "big")
                if size > (1 << 20):
                    self._fail(f"sent a frame of {size} bytes")
                if len(self._pending) >= 5 + size:
                    kind = bytes(self._pending[:1])
                    payload = bytes(self._pending[5 : 5 + size])
                    del self._pending[: 5 + size]
                    return kind, payload
            frames = self._stream.read_frames(deadline)
            if frames is None:
                self._fail("did not answer in time")
            if not frames:
                self._fail("ended")
            for stream, data in frames:
                if stream == 1:
                    self._pending.extend(data)

    def _answer(
        self, deadline: float, on_frame: Callable[[bytes, bytes], None] | None = None
    ) -> dict[str, Any]:
        """Frames up to the ``e`` one (the others go to ``on_frame(kind, payload)``): its
        JSON object."""
        while True:
            kind, payload = self._frame(deadline)
            if kind == b"e":
                if len(payload) > ANSWER_CAP:
                    self._fail("sent an answer too long")
                try:
                    answer = loads_bounded(payload, max_bytes=ANSWER_CAP)
                except ValueError:
                    answer = None
                if not isinstance(answer, dict):
                    self._fail("sent nonsense")
                return answer
            if on_frame is None or kind not in (b"p", b"d"):
                self._fail(f"sent a frame of kind {kind!r}")
            on_frame(kind, payload)

    def _request(self, request: dict[str, Any], body: bytes = b"") -> None:
        if self._stream is None:
            raise KeeperFailed("the state keeper is closed")
        try:
            self._stream.send(json.dumps(request).encode() + b"\n" + body)
        except EngineGone:
            self.close()
            raise
        except OSError as exc:
            self._fail(f"could not be reached: {exc}")

    # ------------------------------------------------------------------ API
    def read(self, paths: Sequence[str], cap_bytes: int) -> State:
        """The writable directories ``paths`` of the box, one state part each (members
        ``<name>/...``), as :func:`~multiturn_envs.sandbox.trees.read_state` reads them
        through the engine; ``too_large`` set when their files pass ``cap_bytes`` together."""
        if any(p not in self.writable for p in paths):
            raise KeeperFailed(f"not writable directories of this box: {list(paths)}")
        self._request({"op": "read", "paths": list(paths), "cap": int(cap_bytes)})
        where = ", ".join(paths)
        guard = TarGuard(where, int(cap_bytes))  # the keeper counts; this holds if it did not
        parts: list[StatePart] = []
        total = 0

        def on_frame(kind: bytes, payload: bytes) -> None:
            nonlocal total
            if kind == b"p":
                path = payload.decode("utf-8", "replace")
                if path not in paths or any(p.path == path for p in parts):
                    raise KeeperFailed(f"the state keeper sent a part {path!r}")
                spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
                parts.append(StatePart(path, spool, 0))
                return
            if not parts:
                raise KeeperFailed("the state keeper sent data before a part")
            guard.feed(payload)
            total += len(payload)
            if total > cap_bytes + (16 << 20):
                raise ArchiveTooLarge(where, int(cap_bytes), total)
            parts[-1].file.write(payload)
            parts[-1].size += len(payload)

        state = State()
        state.parts = parts
        try:
            answer = self._answer(time.monotonic() + READ_S, on_frame)
        except ArchiveTooLarge as exc:
            state.close()
            self.close()  # its stream is out of step now
            state.too_large = exc
            return state
        except KeeperFailed:
            state.close()
            self.close()
            raise
        except BaseException:
            state.close()
            raise
        if "too_large" in answer:
            state.close()
            state.too_large = ArchiveTooLarge(where, int(cap_bytes), int(answer["too_large"]))
            return state
        if "path_too_long" in answer:
            state.close()
            state.too_large = PathTooLong(where, int(answer["path_too_long"]))
            return state
        if answer.get("sizes") != [p.size for p in parts] or len(parts) != len(paths):
            state.close()
            self._fail(f"could not read the state: {answer.get('error', answer)}")
        self.reads += 1
        state.seal()
        return state

    def put(self, path: str, tree: bytes) -> None:
        """Unpack a re-rooted tree (:func:`~multiturn_envs.sandbox.trees.retop`) into the
        writable directory ``path`` of a box no agent has used yet, as ``put_archive``
        does (owners, modes, times; the top's time is now)."""
        if path not in self.writable:
            raise KeeperFailed(f"{path} is not a writable directory of this box")
        self._request({"op": "put", "path": path, "size": len(tree)}, tree)
        answer = self._answer(time.monotonic() + READ_S)
        if answer.get("ok") is not True:
            self._fail(f"could not fill {path}: {answer.get('error', answer)}")

    def read_file(self, path: str, cap_bytes: int) -> bytes | None:
        """One small regular file of a ``readable`` directory, as
        :func:`~multiturn_envs.sandbox.archive_stream.read_small_file` reads it through the
        engine: ``None`` when it is missing, not a regular file (a link, a FIFO) or larger than
        ``cap_bytes``."""
        if posixpath.dirname(path) not in self.readable:
            raise KeeperFailed(f"{path} is not in a readable directory of this box")
        self._request({"op": "file", "path": path, "cap": int(cap_bytes)})
        data = bytearray()

        def on_frame(kind: bytes, payload: bytes) -> None:
            if kind != b"d" or len(data) + len(payload) > cap_bytes:
                raise KeeperFailed(f"the state keeper sent too much of {path}")
            data.extend(payload)

        try:
            answer = self._answer(time.monotonic() + READ_S, on_frame)
        except KeeperFailed:
            self.close()
            raise
        if answer.get("missing") is True:
            return None
        if answer.get("size") != len(data):
            self._fail(f"could not read {path}: {answer.get('error', answer)}")
        return bytes(data)

    def close(self) -> None:
        """Stop the keeper; idempotent."""
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
