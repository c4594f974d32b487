"""A runner session: one long-lived exec of the runner in a container, and the engine's framing.

The pool (:mod:`.docker_pool`) sends each job on the session's stdin and reads the report back
from the exec's attached stream, which the engine multiplexes (:func:`pop_frames`). A session
ends with ``{"done": true}`` per job; an exec that ended is asked for its exit code
(:func:`exec_exit_code`) and the engine's event log for an OOM kill (:func:`oom_killed`).
The Terminal env's shell session (:mod:`.shell_session`) reads the same framing.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

from multiturn_envs.sandbox.hardening import CODE_UID
from multiturn_envs.sandbox.jobs import RUNNER_STDERR_CAP

__all__ = [
    "DONE_LINE",
    "STDERR_CAP",
    "RunnerSession",
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


class RunnerSession:
    """The attached stream of a container's runner session (``runner.py --serve``).

    :meth:`read_report` splits the exec's multiplexed stream (:func:`pop_frames`) as it arrives
    and stops at the report's last line, leaving the stream open for the next job.
    """

    RUNNER: tuple[str, ...] = ("python3", "-I", "/job/runner.pyc", "--serve")

    def __init__(
        self, api: Any, container_id: str, command: tuple[str, ...] | list[str] = RUNNER
    ) -> None:
        self.api = api
        command = list(command)  # another one: tests of the reader against a broken runner
        self.exec_id: str = api.exec_create(
            container_id, command, stdin=True, user=f"{CODE_UID}:{CODE_UID}", workdir="/tmp"
        )["Id"]
        self.sock = api.exec_start(self.exec_id, socket=True)
        self.raw: socket.socket = getattr(self.sock, "_sock", self.sock)
        self.frames = bytearray()

    def idle_and_alive(self) -> bool:
        """Whether the session is still there and has nothing unread, checked without a call.

        A session can end between jobs (the engine restarted, someone killed it): the socket
        then reads as closed. Anything readable between jobs is garbage. Either way the
        container is replaced before a job is lost to it.
        """
        try:
            self.raw.setblocking(False)
            try:
                self.raw.recv(1, socket.MSG_PEEK)
            finally:
                self.raw.setblocking(True)
        except BlockingIOError:  # nothing to read: alive and idle
            return not self.frames
        except ValueError:  # a TLS socket takes no flags: cannot tell, let the job find out
            return not self.frames
        except OSError:
            return False
        return False  # closed (b"") or unexpected output

    def send(self, data: bytes) -> None:
        self.raw.settimeout(30)
        self.raw.sendall(data)

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
            for kind, chunk in pop_frames(self.frames):
                if kind == 2:
                    err_seen += len(chunk)
                    if len(err) < STDERR_CAP:
                        err.extend(chunk[: STDERR_CAP - len(err)])
                    if err_seen > max_stderr:
                        return bytes(out), bytes(err), "flood"
                    continue
                out.extend(chunk)
                if out.endswith(DONE_LINE):
                    return bytes(out), bytes(err), None
                if len(out) > max_bytes:
                    return bytes(out[:max_bytes]), bytes(err), "flood"
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), "hung"
            self.raw.settimeout(left)
            try:
                data = self.raw.recv(1 << 16)
            except TimeoutError:
                return bytes(out), bytes(err), "hung"
            except OSError:
                data = b""
            if not data:
                return bytes(out), bytes(err), "eof"
            self.frames.extend(data)

    def close(self) -> None:
        """End the session's connection for good (``shutdown`` reaches the kernel even while the
        SDK's response still references the socket; ``close`` alone would not, and the engine
        would keep copying the runner's output into a socket nobody reads)."""
        close_stream(self.sock, self.raw)


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
