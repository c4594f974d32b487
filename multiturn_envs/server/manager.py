"""Session lifecycle: capacity, one thread per session, per-request timeouts, idle reaping.

Each session owns one env instance and one single-thread executor, so sessions never share an
env and one session's slow step (a sandbox run) never blocks another's. The event loop only
routes requests. What can go wrong with one session stays with it:

* **Crash** (the env raises where the contract says it never does): the session is closed and
  its env's ``close()`` runs (sandbox containers released); other sessions are untouched.
* **Timeout** (one call past ``request_timeout_s``): the client gets ``TIMEOUT`` and the session
  is closed, because its env may be midway through that call. The close is queued on the
  session's own thread, behind the stuck call; the slot stays counted until the close is done
  so that ``max_sessions`` keeps bounding the threads and containers really alive.
* **Abandoned** (no request for ``idle_timeout_s``, e.g. a client that died without closing its
  socket): a reaper task closes it, and closes its WebSocket too.

Python threads cannot be killed; an env call that never returns keeps its thread. The envs
bound their own work (sandbox and query timeouts), so this only delays a close.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import gymnasium as gym

from multiturn_envs.server import protocol as p
from multiturn_envs.server.session import EnvCrashed, EnvSession

T = TypeVar("T")


@dataclass(eq=False)
class Session:
    """A live session: its env, its thread, and what the reaper needs."""

    id: str
    executor: ThreadPoolExecutor
    env: EnvSession | None = None
    last_active: float = field(default_factory=time.monotonic)
    busy: int = 0
    closed_reason: str | None = None
    on_close: Callable[[str], Awaitable[None]] | None = None


class SessionManager:
    """Creates, finds, runs and closes sessions.

    Args:
        make_env: builds one env (``gym.make(env_id, **env_kwargs)``); called on the new
            session's thread.
        env_id: the id every session serves.
        limits: the server's :class:`~multiturn_envs.server.protocol.Limits`.
    """

    def __init__(
        self, make_env: Callable[[], gym.Env[str, str]], env_id: str, limits: p.Limits
    ) -> None:
        self.make_env = make_env
        self.env_id = env_id
        self.limits = limits
        self.sessions: dict[str, Session] = {}
        self.closing = 0
        self.created = 0
        self.crashed = 0
        self.reaped = 0
        self._lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Future[None]] = set()

    # ------------------------------------------------------------------ lifecycle
    async def create(self) -> Session:
        """A new session with a fresh env; ``CAPACITY_REACHED`` or ``FACTORY_ERROR`` if not."""
        async with self._lock:
            live = len(self.sessions) + self.closing
            if live >= self.limits.max_sessions:
                raise p.ProtocolError(
                    p.CAPACITY_REACHED,
                    f"the server is at its limit of {self.limits.max_sessions} sessions "
                    f"({live} live or closing); retry later or start another server",
                )
            session = Session(uuid.uuid4().hex, ThreadPoolExecutor(1, "mte-session"))
            self.sessions[session.id] = session  # reserves the slot while the env is built
        session.busy += 1
        try:
            loop = asyncio.get_running_loop()
            env = await asyncio.wait_for(
                loop.run_in_executor(session.executor, self._build),
                self.limits.request_timeout_s,
            )
        except Exception as exc:
            await self.close(session, "the env could not be built")
            if isinstance(exc, asyncio.TimeoutError):
                raise p.ProtocolError(p.TIMEOUT, "building the env timed out") from None
            raise p.ProtocolError(
                p.FACTORY_ERROR, f"building {self.env_id} failed: {type(exc).__name__}: {exc}"
            ) from None
        finally:
            session.busy -= 1
        session.env = env
        session.last_active = time.monotonic()
        self.created += 1
        return session

    def _build(self) -> EnvSession:
        return EnvSession(self.make_env(), self.env_id, self.limits)

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None or session.env is None:
            raise p.ProtocolError(
                p.UNKNOWN_SESSION,
                f"unknown session {session_id[:64]!r} (closed, reaped after "
                f"{self.limits.idle_timeout_s:g} s idle, or never created)",
            )
        return session

    async def close(self, session: Session, reason: str) -> None:
        """Forget the session now and close its env on its own thread (idempotent)."""
        async with self._lock:
            if self.sessions.get(session.id) is not session:
                return
            del self.sessions[session.id]
            session.closed_reason = reason
            self.closing += 1
        if session.on_close is not None:
            with contextlib.suppress(Exception):  # the socket may already be gone
                await session.on_close(reason)
        loop = asyncio.get_running_loop()

        def close_env() -> None:
            if session.env is not None:
                session.env.close()

        try:
            await loop.run_in_executor(session.executor, close_env)
        except Exception:  # a failing close must not keep the slot or stop the server
            pass
        finally:
            session.executor.shutdown(wait=False)
            self.closing -= 1

    async def close_all(self) -> None:
        live = list(self.sessions.values())
        await asyncio.gather(*(self.close(s, "server shutdown") for s in live))

    # ------------------------------------------------------------------ running requests
    async def run(self, session: Session, fn: Callable[[EnvSession], T]) -> T:
        """Run ``fn(env_session)`` on the session's thread, within the request timeout.

        ``ProtocolError`` passes through (the session lives on); a crash or a timeout closes
        the session and becomes ``EXECUTION_ERROR`` / ``TIMEOUT``.
        """
        env = session.env
        if env is None or session.closed_reason is not None:
            raise p.ProtocolError(
                p.SESSION_ERROR, f"the session is closed ({session.closed_reason or 'starting'})"
            )
        session.busy += 1
        session.last_active = time.monotonic()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(session.executor, fn, env)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.limits.request_timeout_s)
        except asyncio.TimeoutError:
            self._background(self.close(session, "a request timed out"))
            raise p.ProtocolError(
                p.TIMEOUT,
                f"the request took over {self.limits.request_timeout_s:g} s; "
                "the session is closed (its env may be midway through the call)",
            ) from None
        except EnvCrashed as exc:
            self.crashed += 1
            self._background(self.close(session, f"the env crashed: {exc}"))
            raise p.ProtocolError(
                p.EXECUTION_ERROR, f"{exc}; the session is closed, open a new one"
            ) from None
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()

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
            and s.env is not None
            and now - s.last_active > self.limits.idle_timeout_s
        ]
        for session in stale:
            await self.close(session, f"idle for over {self.limits.idle_timeout_s:g} s")
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
            "sessions_created": self.created,
            "sessions_crashed": self.crashed,
            "sessions_reaped": self.reaped,
        }
