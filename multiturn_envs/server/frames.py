"""The socket between the server and an env worker process: frames and reply tags.

One definition for both kinds of worker (:mod:`.worker`'s one process per session and
:mod:`.pool`'s shared workers), so the two wires cannot drift apart. A frame is a 4-byte
big-endian length and a body. Requests are JSON; a reply is one tag byte and a body:

* :data:`OK` + the result's JSON text (the server wraps it into its own frame unparsed);
* :data:`CHECKPOINT`: the same, for a reset after which the session is a start point (a
  fresh env given that one reset reaches the same state: :mod:`.pool` truncates its replay
  log there; the server hands it to the client as :data:`OK`);
* :data:`ERROR` + ``{"code", "message"}``: a :class:`~.protocol.ProtocolError`, the session
  lives on;
* :data:`CRASH` + a message: the env crashed, the session is closed;
* :data:`READ_OK` / :data:`READ_ERROR`: :data:`OK` / :data:`ERROR` for a request that left the
  session's state as it was (``tools/list``, ``describe``, a state read, a refused request):
  :mod:`.pool` keeps it out of its replay log, so it never counts toward the log's bound; the
  server hands them to the client as :data:`OK` / :data:`ERROR`.
"""

from __future__ import annotations

import socket

OK, ERROR, CRASH, CHECKPOINT = b"o", b"e", b"c", b"k"
"""Reply tags (one byte before the body)."""
READ_OK, READ_ERROR = b"O", b"E"
"""The tags of a reply to a request that changed nothing (the pool's workers only)."""
PLAIN_TAGS = {READ_OK: OK, READ_ERROR: ERROR, CHECKPOINT: OK}
"""What the server hands on for a tag that only the pool reads (every other tag as it is)."""

HEADER = 4
"""Bytes of a frame's length prefix."""


def frame(body: bytes) -> bytes:
    """``body`` with its length prefix."""
    return len(body).to_bytes(HEADER, "big") + body


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Write one whole frame (blocking)."""
    sock.sendall(frame(body))


class FrameReader:
    """A worker's end of the socket: whole request frames, one ``recv`` for most."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def next(self) -> bytes | None:
        """The next frame's body, or ``None`` once the server closed the socket."""
        buffer = self.buffer
        while True:
            if len(buffer) >= HEADER:
                end = HEADER + int.from_bytes(buffer[:HEADER], "big")
                if len(buffer) >= end:
                    body = bytes(buffer[HEADER:end])
                    del buffer[:end]
                    return body
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            buffer += chunk
