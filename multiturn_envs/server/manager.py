"""Session lifecycle: capacity (whole server and per client), requests under a timeout, reaping.

Each session owns one env, run by an :class:`~.worker.EnvRunner`: by default a worker process
of its own (:class:`~.worker.ProcessRunner`), so the event loop only routes requests and
nothing an env does can stall it. What can go wrong with one session stays with it:

* **Crash** (the env raises where the contract says it never does, or its process dies: a
  segfault, ``MemoryError`` under the address-space limit): the client gets
  ``EXECUTION_ERROR`` naming the cause, the session is closed; other sessions are untouched.
* **Timeout** (one call past ``request_timeout_s``): the client gets ``TIMEOUT`` and the
  session is closed, since its env is midway through the call. The env process is stopped
  at once: SIGTERM (the call is interrupted and the env closed, its sandbox containers
  released), SIGKILL after ``close_timeout_s`` (a step that holds the GIL in C code never sees
  the SIGTERM). The slot stays counted until the process is gone, so ``max_sessions`` bounds
  the processes really alive, and is free within ``close_timeout_s`` plus a moment.
* **Abandoned** (no request for ``idle_timeout_s``, e.g. a client that died without closing its
  socket): a reaper task closes it, and closes its WebSocket too.
* **Greedy** (one client address opening session after session): past
  ``max_sessions_per_client`` it gets ``CLIENT_LIMIT``; the other clients keep their share.

With ``isolation="pool"`` (:class:`~.pool.PoolRunner`) a few worker processes host the
sessions; stopping a call kills its worker, and the other sessions on it are moved to a fresh
worker and restored exactly, transparently to their clients (:mod:`.pool`). With
``isolation="thread"`` (:class:`~.worker.ThreadRunner`) a timed-out call cannot be stopped:
its session is closed once the call returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from multiturn_envs.server import protocol as p
from multiturn_envs.server.frames import CRASH, OK
from multiturn_envs.server.pool import PoolRunner, WorkerPool
from multiturn_envs.server.worker import (
    EnvRunner,
    FactoryFailed,
    Isolation,
    ProcessRunner,
    ThreadRunner,
    WorkerFailed,
)


@dataclass(eq=False)
class Session:
    """A live session: its env's runner, its client, and what the reaper needs."""

    id: str
    client: str
    runner: EnvRunner | None = None
    ready: bool = False
    last_active: float = field(default_factory=time.monotonic)
    busy: int = 0
    closed_reason: str | None = None
    on_close: Callable[[str], Awaitable[None]] | None = None


class SessionManager:
    """Creates, finds, runs and closes sessions.

    Args:
        make_env: builds one env (``gym.make(env_id, **env_kwargs)``); runs in the session's
            worker process, so with ``isolation="process"`` it must pickle.
        env_id: the id every session serves.
        limits: the server's :class:`~multiturn_envs.server.protocol.ServerLimits`.
        isolation: ``"pool"`` (a few worker processes, several sessions each),
            ``"process"`` (a worker process per session) or ``"thread"``; ``"auto"`` is
            resolved by the caller (:func:`~.worker.resolve_isolation`).
    """

    def __init__(
        self,
        make_env: Callable[[], gym.Env[str, str]],
        env_id: str,
        limits: p.ServerLimits,
        isolation: Isolation = "process",
    ) -> None:
        if isolation in ("pool", "process"):
            try:
                pickle.dumps(make_env)
            except Exception as exc:
                raise ValueError(
                    f"with isolation={isolation!r} the env factory runs in a worker process "
                    "and must pickle (a module-level function or class, or a "
                    f"functools.partial of one): {type(exc).__name__}: {exc}; or use "
                    "isolation='thread'"
                ) from None
        elif isolation != "thread":
            raise ValueError(f"isolation is 'pool', 'process' or 'thread', got {isolation!r}")
        self.make_env = make_env
        self.env_id = env_id
        self.limits = limits
        self.isolation = isolation
        self.sessions: dict[str, Session] = {}
        self.per_client: Counter[str] = Counter()  # live and closing sessions per client
        self.closing = 0
        self.created = 0
        self.crashed = 0
        self.reaped = 0
        self.timed_out = 0
        self.refused = 0
        self._lock = asyncio.Lock()
        self._process_lock = threading.Lock()
        self.pool = (
            WorkerPool(make_env, env_id, limits, self._process_lock)
            if isolation == "pool"
            else None
        )
        self._reaper: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Future[None]] = set()

    def _runner(self) -> EnvRunner:
        if self.pool is not None:
            return PoolRunner(self.pool)
        if self.isolation == "process":
            return ProcessRunner(self.make_env, self.env_id, self.limits, self._process_lock)
        return ThreadRunner(self.make_env, self.env_id, self.limits)

    # ------------------------------------------------------------------ lifecycle
    async def create(self, client: str = "") -> Session:
        """A new session with a fresh env for ``client`` (its address); ``CAPACITY_REACHED``,
        ``CLIENT_LIMIT``, ``TIMEOUT`` or ``FACTORY_ERROR`` if not."""
        limits = self.limits
        async with self._lock:
            live = len(self.sessions) + self.closing
            if live >= limits.max_sessions:
                self.refused += 1
                raise p.ProtocolError(
                    p.CAPACITY_REACHED,
                    f"the server is at its limit of {limits.max_sessions} sessions "
                    f"({live} live or closing); retry later or start another server",
                )
            if self.per_client[client] >= limits.sessions_per_client:
                self.refused += 1
                raise p.ProtocolError(
                    p.CLIENT_LIMIT,
                    f"this client ({client or 'unknown address'}) holds "
                    f"{self.per_client[client]} sessions, the limit per client "
                    "(the server's max_sessions_per_client); close one first",
                )
            session = Session(uuid.uuid4().hex, client, self._runner())
            self.sessions[session.id] = session  # reserves the slot while the env is built
            self.per_client[client] += 1
        assert session.runner is not None
        session.busy += 1
        try:
            await asyncio.wait_for(session.runner.start(), limits.request_timeout_s)
        except BaseException as exc:
            # a timeout or a cancelled request leaves a half-started worker: stop it
            graceful = isinstance(exc, FactoryFailed)
            self._background(self.close(session, "the env could not be built", graceful))
            if isinstance(exc, asyncio.TimeoutError | TimeoutError):
                raise p.ProtocolError(
                    p.TIMEOUT, f"building the env took over {limits.request_timeout_s:g} s"
                ) from None
            if isinstance(exc, FactoryFailed):
                raise p.ProtocolError(p.FACTORY_ERROR, str(exc)) from None
            if isinstance(exc, WorkerFailed):
                raise p.ProtocolError(p.FACTORY_ERROR, exc.message) from None
            if isinstance(exc, Exception):
                raise p.ProtocolError(
                    p.FACTORY_ERROR, f"starting the env failed: {type(exc).__name__}: {exc}"
                ) from None
            raise
        finally:
            session.busy -= 1
        session.last_active = time.monotonic()
        session.ready = True
        self.created += 1
        return session

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None or not session.ready or session.closed_reason is not None:
            raise p.ProtocolError(
                p.UNKNOWN_SESSION,
                f"unknown session {session_id[:64]!r} (closed, reaped after "
                f"{self.limits.idle_timeout_s:g} s idle, or never created)",
            )
        return session

    async def close(self, session: Session, reason: str, graceful: bool = True) -> None:
        """Forget the session now and stop its env (idempotent). ``graceful``: the env is
        asked to close; otherwise (a timeout, a crash) its process is stopped mid-call."""
        async with self._lock:
            if self.sessions.get(session.id) is not session:
                return
            del self.sessions[session.id]
            session.closed_reason = reason
            self.closing += 1
        try:
            if session.on_close is not None:
                with contextlib.suppress(Exception):  # the socket may already be gone
                    await session.on_close(reason)
            if session.runner is not None:
                with contextlib.suppress(Exception):  # a failing stop must not keep the slot
                    await session.runner.stop(graceful=graceful)
        finally:
            self.closing -= 1
            self.per_client[session.client] -= 1
            if self.per_client[session.client] <= 0:
                del self.per_client[session.client]

    async def close_all(self) -> None:
        if self.pool is not None:  # calls still running are stopped with their workers
            self.pool.shutting_down = True
        live = list(self.sessions.values())
        await asyncio.gather(*(self.close(s, "server shutdown") for s in live))
        if self._jobs:  # closes already under way (timeouts, crashes)
            await asyncio.gather(*self._jobs, return_exceptions=True)
        if self.pool is not None:
            await self.pool.close()

    # ------------------------------------------------------------------ running requests
    async def run(self, session: Session, op: str, *args: Any) -> str:
        """Run ``op`` on the session's env within the request timeout; the result's JSON text.

        ``ProtocolError`` from the env passes through (the session lives on); a crash, a dead
        env process or a timeout closes the session and becomes ``EXECUTION_ERROR`` /
        ``TIMEOUT``.
        """
        runner = session.runner
        if runner is None or session.closed_reason is not None:
            raise p.ProtocolError(
                p.SESSION_ERROR, f"the session is closed ({session.closed_reason or 'starting'})"
            )
        session.busy += 1
        session.last_active = time.monotonic()
        try:
            reply = await runner.call(op, list(args), self.limits.request_timeout_s)
        except (asyncio.TimeoutError, TimeoutError):  # one type from Python 3.11 on
            self.timed_out += 1
            self._background(self.close(session, "a request timed out", graceful=False))
            stopped = {
                "process": "its env process is stopped",
                "pool": "its worker process is stopped (the other sessions on it are moved "
                "to a fresh one)",
            }.get(self.isolation, "its env may be midway through the call")
            raise p.ProtocolError(
                p.TIMEOUT,
                f"the request took over {self.limits.request_timeout_s:g} s; the session is "
                f"closed and {stopped}",
            ) from None
        except WorkerFailed as exc:
            self.crashed += 1
            self._background(self.close(session, exc.message, graceful=False))
            raise p.ProtocolError(
                p.EXECUTION_ERROR, f"{exc.message}; the session is closed, open a new one"
            ) from None
        except asyncio.CancelledError:  # the request went away midway: the env's state with it
            self._background(self.close(session, "a request was cancelled", graceful=False))
            raise
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
        tag, body = reply[:1], reply[1:]
        if tag == OK:
            return body.decode("utf-8")
        if tag == CRASH:
            self.crashed += 1
            message = body.decode("utf-8", "replace")
            self._background(self.close(session, f"the env crashed: {message}", graceful=True))
            raise p.ProtocolError(
                p.EXECUTION_ERROR, f"{message}; the session is closed, open a new one"
            )
        error = p.loads_object(body)
        raise p.ProtocolError(str(error.get("code")), str(error.get("message")))

    # ------------------------------------------------------------------ reaping
    def start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.ensure_future(self._reap_forever())

    async def stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None

    async def reap_idle(self) -> int:
        """Close every session idle for longer than the idle timeout; how many were closed."""
        now = time.monotonic()
        stale = [
            s
            for s in list(self.sessions.values())
            if s.busy == 0
            and s.ready
            and s.closed_reason is None
            and now - s.last_active > self.limits.idle_timeout_s
        ]
        for session in stale:
            session.closed_reason = "idle"  # refused from now on, and never reaped twice
            self._background(self.close(session, f"idle for over {self.limits.idle_timeout_s:g} s"))
        self.reaped += len(stale)
        return len(stale)

    async def _reap_forever(self) -> None:
        interval = min(max(self.limits.idle_timeout_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):  # the reaper outlives any failing close
                await self.reap_idle()

    def _background(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(job)
        self._jobs.add(task)  # a reference, so the task is not collected midway
        task.add_done_callback(self._jobs.discard)

    def stats(self) -> dict[str, Any]:
        return {
            "active_sessions": len(self.sessions),
            "closing_sessions": self.closing,
            "max_sessions": self.limits.max_sessions,
            "max_sessions_per_client": self.limits.sessions_per_client,
            "clients": len(self.per_client),
            "isolation": self.isolation,
            "sessions_created": self.created,
            "sessions_crashed": self.crashed,
            "sessions_timed_out": self.timed_out,
            "sessions_reaped": self.reaped,
            "sessions_refused": self.refused,
            **(self.pool.stats() if self.pool is not None else {}),
        }
