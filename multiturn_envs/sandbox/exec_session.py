"""Attached execs on a Docker engine: the engine's stream framing, a bounded reader, the runner
session.

An exec started with stdin open and ``socket=True`` gives one socket: what is written goes to
the process's stdin, and its stdout (stream 1) and stderr (stream 2) come back multiplexed in
frames (:func:`pop_frames`). :class:`ExecStream` is that socket with a deadline-bound reader
and a close that reaches the engine at once; it is what a Docker box's ``process`` returns
(:class:`~multiturn_envs.sandbox.provider.ProcessStream`). The code pool's
:class:`RunnerSession` (``runner.py --serve`` in a container, one job after another) and the
Terminal's shell (:mod:`.shell_session`) and checker (:mod:`.checker`) all read through it.
An exec that ended is asked for its exit code (:meth:`ExecStream.exit_code`) and the engine's
event log for an OOM kill (:func:`oom_killed`).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from multiturn_envs.sandbox.jobs import RUNNER_STDERR_CAP

__all__ = [
    "DONE_LINE",
    "STDERR_CAP",
    "ExecStream",
    "RunnerSession",
    "close_stream",
    "exec_exit_code",
    "oom_killed",
    "pop_frames",
]

DONE_LINE = b'{"done": true}\n'
STDERR_CAP = 1 << 16


def pop_frames(buf: bytearray) -> Iterator[tuple[int, bytes]]:
    """The complete frames at the head of ``buf``, each removed as it is yielded.

    The engine multiplexes an exec's stdout (stream 1) and stderr (2) on one socket, each
    frame an 8-byte header (stream id, 3 zero bytes, big-endian length) and its bytes. A frame
    not wholly in ``buf`` yet stays there for the next call.
    """
    while len(buf) >= 8:
        kind, size = struct.unpack(">BxxxL", buf[:8])
        if len(buf) < 8 + size:
            return
        chunk = bytes(buf[8 : 8 + size])
        del buf[: 8 + size]
        yield kind, chunk


def exec_exit_code(api: Any, exec_id: str) -> int | None:
    """The exec's exit code; the engine records it a moment after the stream closes."""
    for _ in range(200):
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        time.sleep(0.005)
    return None


def oom_killed(api: Any, container_id: str, since: float) -> bool:
    """Whether the kernel killed a process of the container for memory since ``since``.

    Asked of the engine's event log (an ``oom`` event per kill), not of the container's
    ``State.OOMKilled``: the engine only sets that flag when the container itself exits, and
    a pool's container outlives the runner the kernel killed. ``until`` is a second ahead so
    that an event the engine is still processing is waited for (this path runs only after a
    runner died, so the wait costs nothing in the normal case).
    """
    try:
        events = api.events(
            since=int(since) - 1,
            until=int(time.time()) + 1,
            filters={"container": container_id, "event": "oom"},
            decode=True,
        )
        return any(True for _ in events)
    except Exception:
        return False


def close_stream(sock: Any, raw: socket.socket) -> None:
    """Close an exec's attached stream for good: ``shutdown`` on the raw socket first, which
    reaches the kernel even while the SDK's response object still references the socket
    (``close`` alone would not, and the engine would keep copying the process's output into a
    socket nobody reads), then both objects. Never raises."""
    with contextlib.suppress(Exception):
        raw.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        raw.close()
    with contextlib.suppress(Exception):
        sock.close()


class ExecStream:
    """One attached exec (stdin open, stdout+stderr multiplexed) with a deadline-bound reader.

    Args:
        api: the engine's low-level client (``docker.APIClient``).
        container_id: the container.
        command: what to run.
        user: ``uid:gid`` it runs as.
        workdir: its working directory.
        environment: added to the image's environment.
        stdin: keep the process's stdin open (``False``: it reads end of file at once).
    """

    def __init__(
        self,
        api: Any,
        container_id: str,
        command: Sequence[str],
        *,
        user: str,
        workdir: str = "/",
        environment: Mapping[str, str] | None = None,
        stdin: bool = True,
    ) -> None:
        self.api = api
        self.exec_id: str = api.exec_create(
            container_id,
            list(command),
            stdin=stdin,
            user=user,
            workdir=workdir,
            environment=dict(environment) if environment else None,
        )["Id"]
        self.sock = api.exec_start(self.exec_id, socket=True)
        self.raw: socket.socket = getattr(self.sock, "_sock", self.sock)
        if self.raw.family in (socket.AF_INET, socket.AF_INET6):
            # an engine over TCP: a job sent in two writes must not wait on Nagle for the
            # engine's delayed ACK (+40 ms a submission on a remote engine, measured)
            with contextlib.suppress(OSError):
                self.raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._frames = bytearray()
        self.closed = False

    def send(self, data: bytes) -> None:
        self.raw.settimeout(30)
        self.raw.sendall(data)

    def read_frames(self, deadline: float) -> list[tuple[int, bytes]] | None:
        """The next complete frames; ``[]`` at end of stream, ``None`` at the deadline."""
        while True:
            frames = list(pop_frames(self._frames))
            if frames:
                return frames
            if self.closed:
                return []
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.raw.settimeout(left)
            try:
                data = self.raw.recv(1 << 16)
            except TimeoutError:
                return None
            except OSError:
                data = b""
            if not data:
                self.closed = True
                continue
            self._frames.extend(data)

    def unread(self, frames: Sequence[tuple[int, bytes]]) -> None:
        """Put frames back at the head of the stream (a reader that stopped mid-batch)."""
        head = b"".join(struct.pack(">BxxxL", kind, len(chunk)) + chunk for kind, chunk in frames)
        self._frames[:0] = head

    def read(self, deadline: float) -> bytes | None:
        """The next payload bytes (both streams), ``b""`` at end of stream, ``None`` at the
        deadline."""
        frames = self.read_frames(deadline)
        if frames is None:
            return None
        return b"".join(chunk for _kind, chunk in frames)

    def idle_and_alive(self) -> bool:
        """Whether the process is still there and has nothing unread, checked without a call.

        A process can end between uses (the engine restarted, someone killed it): the socket
        then reads as closed. Anything readable between uses is garbage. Either way the caller
        replaces it before a job is lost to it.
        """
        if self.closed:
            return False
        try:
            self.raw.setblocking(False)
            try:
                self.raw.recv(1, socket.MSG_PEEK)
            finally:
                self.raw.setblocking(True)
        except BlockingIOError:  # nothing to read: alive and idle
            return not self._frames
        except ValueError:  # a TLS socket takes no flags: cannot tell, let the job find out
            return not self._frames
        except OSError:
            return False
        return False  # closed (b"") or unexpected output

    def exit_code(self) -> int | None:
        """The process's exit status once it ended (``None``: still running or unknown)."""
        try:
            return exec_exit_code(self.api, self.exec_id)
        except Exception:
            return None

    def close(self) -> None:
        """End the exec's connection for good.

        ``shutdown`` ends the TCP/unix connection whatever else still holds the socket (the
        SDK's response object keeps a reference, so ``close`` alone never reaches the kernel):
        the engine stops copying the process's output at once. Without it a process flooding
        its output (``yes``) keeps the engine's copy loop blocked on a full socket and every
        later call that waits for that exec (removing the container) hangs.
        """
        self.closed = True
        close_stream(self.sock, self.raw)


class RunnerSession:
    """The code runner's session (``runner.py --serve``) in a container, on a process stream.

    :meth:`read_report` splits the stream as it arrives and stops at the report's last line,
    leaving the stream open for the next job.
    """

    RUNNER: tuple[str, ...] = ("python3", "-I", "/job/runner.pyc", "--serve")

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def idle_and_alive(self) -> bool:
        return bool(self.stream.idle_and_alive())

    def send(self, data: bytes) -> None:
        self.stream.send(data)

    def read_report(
        self, guard_s: float, max_bytes: int, max_stderr: int = RUNNER_STDERR_CAP
    ) -> tuple[bytes, bytes, str | None]:
        """(stdout, stderr, why it ended early or ``None``) of the job in flight.

        ``"eof"``: the session ended (its exit code says why); ``"hung"``: no report within
        ``guard_s`` (the runner's own alarm should have fired long before); ``"flood"``: the
        runner wrote more than ``max_bytes`` of report or ``max_stderr`` bytes to its stderr
        (a sound runner never does: :func:`~multiturn_envs.sandbox.jobs.report_bytes`), so it
        is not read to the end. Stderr past :data:`STDERR_CAP` is dropped.
        """
        out, err = bytearray(), bytearray()
        err_seen = 0
        deadline = time.monotonic() + guard_s
        while True:
            frames = self.stream.read_frames(deadline)
            if frames is None:
                return bytes(out), bytes(err), "hung"
            if not frames:
                return bytes(out), bytes(err), "eof"
            for index, (kind, chunk) in enumerate(frames):
                if kind == 2:
                    err_seen += len(chunk)
                    if len(err) < STDERR_CAP:
                        err.extend(chunk[: STDERR_CAP - len(err)])
                    if err_seen > max_stderr:
                        return bytes(out), bytes(err), "flood"
                    continue
                out.extend(chunk)
                if out.endswith(DONE_LINE):
                    if index + 1 < len(frames):  # not ours: idle_and_alive will see it
                        self.stream.unread(frames[index + 1 :])
                    return bytes(out), bytes(err), None
                if len(out) > max_bytes:
                    return bytes(out[:max_bytes]), bytes(err), "flood"

    def exit_code(self) -> int | None:
        return self.stream.exit_code()  # type: ignore[no-any-return]

    def close(self) -> None:
        """End the session's connection for good (:meth:`ExecStream.close`)."""
        self.stream.close()
