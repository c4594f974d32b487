"""Connections before they are sessions: admission and timeouts on uvicorn's HTTP side.

uvicorn bounds neither a connection that never sends a request nor one that sends its headers
a byte at a time (its keep-alive timer starts after a first answer, and each byte received
cancels it), and its ``limit_concurrency`` answers 503 to *everyone* once that many sockets are
open, idle or not: 70 idle sockets took a server started with ``--max-sessions 16`` off the
air. :class:`ConnectionGuard` replaces it (uvicorn runs with ``limit_concurrency=None`` and the
protocol class :func:`guarded_h11`):

* a connection must send a whole request (headers; the app bounds the body) within
  ``handshake_timeout_s`` of opening or of its previous answer, or it is cut;
* at most ``max_connections`` HTTP connections at once, and ``max_connections_per_client``
  per client address. A new connection past either bound replaces the longest-idle connection
  (no request in progress) of that scope, and is dropped only if every one is busy: idle
  sockets can never lock out a client that sends requests;
* a request must be answered within ``request_deadline_s`` (a client that stops reading its
  answer is cut, and its buffered answer dropped).

A connection that upgrades to a WebSocket leaves the guard: it holds a session, bounded by
``max_sessions`` and ``max_sessions_per_client``; uvicorn's pings close it when the peer is
gone, and the idle reaper when it says nothing.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from multiturn_envs.server import protocol as p


class ConnectionGuard:
    """Admission and accounting of one server's HTTP connections (see the module docstring).

    Args:
        limits: ``max_connections``, ``max_connections_per_client``, ``handshake_timeout_s``.
        request_deadline_s: the longest one HTTP request may take, answer written included.
    """

    def __init__(self, limits: p.ServerLimits, request_deadline_s: float) -> None:
        self.limits = limits
        self.request_deadline_s = request_deadline_s
        self.open: dict[Any, str] = {}  # connection -> client address
        self.idle: OrderedDict[Any, None] = OrderedDict()  # no request in progress, oldest first
        self.per_client: Counter[str] = Counter()
        self.evicted = 0
        self.dropped = 0
        self.timed_out = 0

    def admit(self, conn: Any, client: str) -> bool:
        """Count a new connection in, making room if needed; ``False``: drop it."""
        if len(self.open) >= self.limits.max_connections and not self._evict(None):
            self.dropped += 1
            return False
        if self.per_client[client] >= self.limits.max_connections_per_client and not self._evict(
            client
        ):
            self.dropped += 1
            return False
        self.open[conn] = client
        self.per_client[client] += 1
        self.idle[conn] = None
        return True

    def _evict(self, client: str | None) -> bool:
        """Cut the longest-idle connection (of ``client``, if given); whether there was one."""
        for conn in self.idle:
            if client is None or self.open.get(conn) == client:
                self.release(conn)
                conn.transport.abort()
                self.evicted += 1
                return True
        return False

    def release(self, conn: Any) -> None:
        client = self.open.pop(conn, None)
        if client is None:
            return
        self.idle.pop(conn, None)
        self.per_client[client] -= 1
        if self.per_client[client] <= 0:
            del self.per_client[client]

    def busy(self, conn: Any) -> None:
        self.idle.pop(conn, None)

    def rested(self, conn: Any) -> None:
        if conn in self.open:
            self.idle[conn] = None
            self.idle.move_to_end(conn)

    def stats(self) -> dict[str, int]:
        return {
            "http_connections": len(self.open),
            "http_connections_evicted": self.evicted,
            "http_connections_dropped": self.dropped,
            "http_connections_timed_out": self.timed_out,
        }


def guarded_h11(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's h11 protocol class under ``guard`` (pass it as ``uvicorn.Config(http=...)``)."""

    class GuardedH11Protocol(H11Protocol):  # type: ignore[misc]
        _guard_refused = False
        _guard_timer: asyncio.TimerHandle | None = None
        _guard_cycle: Any = None  # the request in progress when the timer was armed

        def connection_made(self, transport: asyncio.Transport) -> None:
            peer = transport.get_extra_info("peername")
            client = str(peer[0]) if isinstance(peer, tuple | list) and peer else ""
            if not guard.admit(self, client):
                self._guard_refused = True
                transport.abort()
                return
            super().connection_made(transport)
            self._guard_arm(self.guard_handshake_expired, guard.limits.handshake_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._guard_disarm()
            guard.release(self)
            if not self._guard_refused:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if (
                cycle is not None
                and cycle is not self._guard_cycle
                and self.transport.get_protocol() is self
            ):  # a new request has begun
                self._guard_cycle = cycle
                guard.busy(self)
                self._guard_arm(self.guard_request_expired, guard.request_deadline_s)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                guard.rested(self)
                self._guard_arm(self.guard_handshake_expired, guard.limits.handshake_timeout_s)

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._guard_disarm()
            guard.release(self)
            super().handle_websocket_upgrade(event)

        def guard_handshake_expired(self) -> None:
            """No whole request within the handshake timeout: cut the connection."""
            self._guard_timer = None
            if self.cycle is self._guard_cycle and self.transport.get_protocol() is self:
                guard.timed_out += 1
                guard.release(self)
                self.transport.abort()

        def guard_request_expired(self) -> None:
            """A request still unanswered at the deadline: cut the connection."""
            self._guard_timer = None
            cycle = self.cycle
            if (
                cycle is self._guard_cycle
                and cycle is not None
                and not cycle.response_complete
                and self.transport.get_protocol() is self
            ):
                guard.timed_out += 1
                guard.release(self)
                self.transport.abort()

        def _guard_arm(self, callback: Any, delay: float) -> None:
            self._guard_disarm()
            self._guard_timer = self.loop.call_later(delay, callback)

        def _guard_disarm(self) -> None:
            if self._guard_timer is not None:
                self._guard_timer.cancel()
                self._guard_timer = None

    return GuardedH11Protocol
