"""Sessions' envs in a small pool of worker processes, each hosting several sessions.

Why. A worker process per session (:class:`~.worker.ProcessRunner`) can stop any step, but
with many sessions on few cores each step wakes a process of its own, whose memory is out of
the caches by then: at 16 FrozenLake clients on 2 cores that cost ~900 us of worker CPU a
served step against ~520 us with env steps on threads of the server (docs/ecosystem.md), and
the served throughput fell to half the thread design's. Here
:attr:`~.protocol.ServerLimits.pool_size` workers (default: one per CPU) host the sessions,
each placed on the least-loaded worker.

What is kept from a process per session. The event loop never runs env code; only JSON
crosses a worker's socket (a worker an agent took over cannot reach into the server); workers
are forked from the fork server (:func:`~.worker.prepare`) and die with the server
(``PR_SET_PDEATHSIG``); a call past its timeout is stopped (its worker gets SIGTERM, SIGKILL
after ``close_timeout_s``) and its session closed with ``TIMEOUT``; a crash (an exception
where the contract says none, a ``CRASH`` reply) closes its session only; a worker lives under
an address-space limit.

What is new: neighbours. Stopping a step means killing its worker, and the other sessions on
it did nothing wrong. So each of them is **moved** to a fresh worker and restored exactly,
transparently to its client: the server keeps, per session, the requests that changed its
state since the last point it can start from (the env's build, then each reset, step, tool
call and JSON-RPC request that reached the env; a seeded reset with no snapshot kept truncates
the log to itself: the worker tags its reply :data:`~.frames.CHECKPOINT`; a request that
changed nothing, a tools listing, ``describe``, a state read, one refused before it reached
the env, is tagged :data:`~.frames.READ_OK` and left out) and a hash chain of their replies. On
the fresh worker the env is rebuilt with the session's salt (the ids it draws are keyed by it,
:mod:`.session`), the log replayed, and the replayed replies' chain compared with the
recorded one; a call that was in flight is then sent again, with its full timeout. A session
whose replay differs (an env that is not deterministic), whose log went over
``max_replay_requests``/``max_replay_bytes``, or whose replay fails, is closed with an
``EXECUTION_ERROR`` saying why, at its next request, rather than served a different state. A
worker that dies (a segfault, the OOM killer, an operator's SIGKILL) is replaced the same way,
and the session whose call was running is moved too, its call sent again (the call may only
have reached a worker that was already dead); if the worker running that call dies as well, its
session is closed, naming the signal or exit status.

One request at a time in a worker, not a thread per session. A worker runs its sessions'
requests in the order they were sent, on its main thread, so the server knows which call is
running (the oldest unanswered one) and starts a call's clock when the calls before it are
answered: a call's timeout counts its own run only, never time queued behind a neighbour, and
the call judged to have overrun is always the one that did (with threads, a neighbour holding
the GIL in C code freezes the others, and the server cannot tell which of the calls in flight
is to blame without per-thread CPU accounting). It also costs a worker less CPU than a
hand-off to a session thread (one worker driven alone: ~25-35 us a FrozenLake request against
~50 us with a thread per session, ~30 us with a process per session), every env lives on
one thread (SQLite connections refuse others), and SIGTERM interrupts a running step in Python
code, as with a process per session. What is lost: within
one worker, a SQLite query that releases the GIL no longer overlaps a neighbour's step (the
workers, one per CPU, still run in parallel), and a slow but legal step delays its worker's
other sessions (their latency, never their timeouts). Envs whose steps wait on I/O
(``blocking_io``) are served with a process per session by default.

The wire (:mod:`.frames`): a request is JSON ``[sid, seq, op, *args]`` (``sid``: the
session's id on that worker; ``seq``: the request's number, which keys the ids the session
draws); ops are :mod:`.worker`'s plus ``open`` (build the env, with the salt) and ``close``;
a reply frame is the sid (4 bytes, big-endian) then the tagged reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import resource
import secrets
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from multiturn_envs.server import protocol as p
from multiturn_envs.server.frames import (
    CHECKPOINT,
    CRASH,
    HEADER,
    OK,
    PLAIN_TAGS,
    READ_ERROR,
    READ_OK,
    FrameReader,
    frame,
    send_frame,
)
from multiturn_envs.server.session import EnvSession
from multiturn_envs.server.worker import (
    FactoryFailed,
    Stopped,
    WorkerFailed,
    describe_exit,
    die_with_parent,
    handle,
    on_sigterm,
    terminate,
    wait_exited,
)

SID_BYTES = 4
"""Bytes of the session id before each reply."""


_MARGIN = 64 << 20
"""Room above what a pool worker has mapped that a lowered memory limit always leaves."""


# ------------------------------------------------------------------------------ the worker
def _mapped_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def fit_memory(limit_bytes: int, sessions: int, most_sessions: int) -> None:
    """Set this worker's address-space limit to ``limit_bytes`` per hosted session (at least
    one; at most ``most_sessions``), never below what is mapped now plus a margin: a limit
    lowered under what the departed sessions left mapped would fail the others' allocations."""
    if limit_bytes <= 0:
        return
    hard = limit_bytes * max(1, most_sessions)
    soft = max(limit_bytes * max(1, sessions), _mapped_bytes() + _MARGIN)
    with contextlib.suppress(ValueError, OSError):
        current_hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        resource.setrlimit(resource.RLIMIT_AS, (min(soft, hard), hard))


def pool_worker_main(
    sock: socket.socket,
    make_env: Callable[[], gym.Env[str, str]],
    env_id: str,
    limits: p.ServerLimits,
) -> None:
    """A pool worker process: host sessions, running their requests one at a time in the
    order they come, until EOF on ``sock`` (or SIGTERM, which interrupts a call in Python
    code); then close every env."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
    signal.signal(signal.SIGTERM, on_sigterm)
    die_with_parent()
    memory, most = limits.worker_memory_bytes, limits.max_sessions
    fit_memory(memory, 1, most)
    hosted: dict[int, EnvSession] = {}

    def reply(sid: int, body: bytes) -> None:
        send_frame(sock, sid.to_bytes(SID_BYTES, "big") + body)

    try:
        reply(0, OK + b"null")  # ready
        requests = FrameReader(sock)
        while (request := requests.next()) is not None:
            sid, seq, op, *args = json.loads(request)
            session = hosted.get(sid)
            if op == "open":
                fit_memory(memory, len(hosted) + 1, most)
                try:
                    env = make_env()
                    hosted[sid] = EnvSession(env, env_id, limits, salt=bytes.fromhex(args[0]))
                except Exception as exc:
                    message = f"building {env_id} failed: {type(exc).__name__}: {exc}"[:4000]
                    reply(sid, CRASH + message.encode("utf-8", "backslashreplace"))
                    continue
                reply(sid, OK + b"null")
            elif op == "close":
                hosted.pop(sid, None)
                with contextlib.suppress(Exception):
                    if session is not None:
                        session.close()
                fit_memory(memory, len(hosted), most)
                reply(sid, OK + b"null")
            elif session is None:
                reply(sid, CRASH + f"no session {sid} on this worker".encode())
            else:
                reply(sid, handle(session, op, args, limits.max_reply_bytes, seq, True))
    except (Stopped, OSError):
        pass
    finally:
        signal.signal(signal.SIGTERM, on_sigterm)  # a second SIGTERM stops a slow close
        with contextlib.suppress(Stopped, Exception):
            for session in hosted.values():
                with contextlib.suppress(Exception):
                    session.close()
            # a multiprocessing child skips atexit; run it, as worker.worker_main does
            import atexit

            atexit._run_exitfuncs()
        with contextlib.suppress(OSError):
            sock.close()


# ------------------------------------------------------------------------------ the server's side
class Moved(Exception):
    """The worker of a call was replaced before its reply came: send it again once moved."""


@dataclass(eq=False)
class _Call:
    runner: PoolRunner
    future: asyncio.Future[bytes]
    timeout_s: float
    timer: asyncio.TimerHandle | None = None
    replay: bool = False
    """A request of a restore (rebuilding the env, replaying the log): it ran before."""


def _consume(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception retrieved (its awaiter may have gone: a cancelled request)."""
    if not future.cancelled():
        future.exception()


def _chain(chain: bytes, reply: bytes) -> bytes:
    digest = hashlib.blake2b(chain, digest_size=16)
    digest.update(reply)
    return digest.digest()


class PoolWorker(asyncio.Protocol):
    """One worker process of the pool and the server's end of its socket."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.process: Any = None
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = self.loop.create_future()
        self.ready.add_done_callback(_consume)
        self.accepting = False
        self.sessions: dict[int, PoolRunner] = {}
        self.queue: deque[_Call] = deque()
        """Calls sent and not answered, in the order the worker runs them (the first is
        running; its timer is the only one armed)."""
        self.next_sid = 1
        self.gone: asyncio.Future[None] | None = None
        self.failure: str | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else int(self.process.pid or 0) or None

    def adopt(self, runner: PoolRunner) -> int:
        """Host ``runner`` here; its session id on this worker."""
        sid = self.next_sid
        self.next_sid += 1
        self.sessions[sid] = runner
        return sid

    # -------------------------------------------------------------- the socket
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        limit = self.pool.limits.max_reply_bytes + SID_BYTES + 1
        while len(buffer) >= HEADER:
            size = int.from_bytes(buffer[:HEADER], "big")
            if size > limit:
                self.failure = f"the env process sent a reply of {size:,} bytes (limit exceeded)"
                if self.transport is not None:
                    self.transport.abort()
                return
            if len(buffer) < HEADER + size:
                return
            sid = int.from_bytes(buffer[HEADER : HEADER + SID_BYTES], "big")
            reply = bytes(buffer[HEADER + SID_BYTES : HEADER + size])
            del buffer[: HEADER + size]
            if sid == 0:  # the worker is up
                if not self.ready.done():
                    self.accepting = True
                    self.ready.set_result(None)
                continue
            queue = self.queue
            if not queue or queue[0].runner.sid != sid:
                self.failure = "the env process answered out of turn"
                if self.transport is not None:
                    self.transport.abort()
                return
            call = queue.popleft()
            if call.timer is not None:
                call.timer.cancel()
            if not call.future.done():
                call.future.set_result(reply)
            if queue:  # the next call starts now: its clock too
                self._arm(queue[0])

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(WorkerFailed("the env process closed its connection"))
        self.pool.lost(self)

    # -------------------------------------------------------------- requests
    def request(
        self, runner: PoolRunner, body: bytes, timeout_s: float, replay: bool = False
    ) -> asyncio.Future[bytes]:
        """Send ``body`` (JSON ``[seq, op, ...]``) for ``runner``'s session; its reply's future
        (``TimeoutError`` if this call overran and was judged the culprit, :class:`Moved` if
        the worker was replaced meanwhile, ``WorkerFailed`` if it died running this call).
        The worker runs calls in the order they were sent, so a call's clock starts when the
        calls before it are answered: time queued behind a neighbour never counts."""
        call = _Call(runner, self.loop.create_future(), timeout_s, replay=replay)
        call.future.add_done_callback(_consume)
        if not self.accepting:  # retired: its queue was settled, nothing would answer this
            call.future.set_exception(Moved())
            return call.future
        self.queue.append(call)
        if len(self.queue) == 1:
            self._arm(call)
        assert self.transport is not None
        self.transport.write(frame(b"[%d," % runner.sid + body[1:]))
        return call.future

    def _arm(self, call: _Call) -> None:
        call.timer = self.loop.call_later(call.timeout_s, self.pool.expired, self, call)


class PoolRunner:
    """A session's env on a worker of a :class:`WorkerPool` (the :class:`~.worker.EnvRunner`
    calls), with what moving it to another worker needs: its salt and its replay log."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.worker: PoolWorker | None = None
        self.retired: PoolWorker | None = None  # the worker it was on when that was stopped
        self.sid = 0
        self.salt = secrets.token_hex(16)
        self.seq = 0
        self.log: list[bytes] = []
        self.log_bytes = 0
        self.chain = b""
        self.unrestorable: str | None = None
        self.failure: str | None = None
        self.closing = False
        self.suspect = False
        """Its call was running when its worker died; a second death running its call makes
        it the culprit."""
        self._lock = asyncio.Lock()  # one request at a time
        self._ready = asyncio.Event()  # placed on a live worker (or failed)

    @property
    def pid(self) -> int | None:
        return None if self.worker is None else self.worker.pid

    def _open_body(self) -> bytes:
        return json.dumps([0, "open", self.salt]).encode()

    async def start(self) -> None:
        worker = await self.pool.place(self)
        timeout = self.pool.limits.request_timeout_s
        try:
            if worker is None:
                raise Moved
            reply = await worker.request(self, self._open_body(), timeout)
        except Moved:  # its worker died meanwhile: built on the fresh one instead
            await self._ready.wait()
            if self.failure is not None:
                raise WorkerFailed(self.failure) from None
            return
        if reply[:1] != OK:
            raise FactoryFailed(reply[1:].decode("utf-8", "replace"))
        self._ready.set()

    async def call(self, op: str, args: list[Any], timeout_s: float) -> bytes:
        if self._lock.locked():  # an earlier request of this session is still running
            await asyncio.wait_for(self._lock.acquire(), timeout_s)
        else:
            await self._lock.acquire()
        try:
            self.seq += 1
            body = json.dumps([self.seq, op, *args], ensure_ascii=False).encode(
                "utf-8", "backslashreplace"
            )
            while True:
                if not self._ready.is_set():
                    await self._ready.wait()  # being moved
                if self.failure is not None:
                    raise WorkerFailed(self.failure)
                worker = self.worker
                assert worker is not None
                try:
                    reply = await worker.request(self, body, timeout_s)
                except Moved:
                    continue  # sent again on the fresh worker, with a fresh clock
                except TimeoutError:
                    self._detach("a request timed out")
                    raise
                except WorkerFailed as exc:
                    self._detach(exc.message)
                    raise
                break
            self.suspect = False
            self._record(body, reply)
            plain = PLAIN_TAGS.get(reply[:1])
            return reply if plain is None else plain + reply[1:]
        finally:
            self._lock.release()

    def _record(self, body: bytes, reply: bytes) -> None:
        """Keep a request that may have changed the session's state, for a replay: the worker
        says which did not (:data:`~.frames.READ_OK`, :data:`~.frames.READ_ERROR`: a tools
        listing, ``describe``, a state read, a request refused before it reached the env),
        so only the others count toward the log's bound."""
        tag = reply[:1]
        if tag in (CRASH, READ_OK, READ_ERROR):
            return
        if tag == CHECKPOINT:  # a fresh env given this reset alone is where this session is
            self.log, self.log_bytes = [body], len(body)
            self.chain = _chain(b"", reply)
            self.unrestorable = None
            return
        if self.unrestorable is not None:
            return
        self.log.append(body)
        self.log_bytes += len(body)
        self.chain = _chain(self.chain, reply)
        limits = self.pool.limits
        if len(self.log) > limits.max_replay_requests or self.log_bytes > limits.max_replay_bytes:
            self.unrestorable = (
                "its requests since its last seeded reset (with no snapshot kept) are over "
                f"the replay log's bound of {limits.max_replay_requests:,} requests or "
                f"{limits.max_replay_bytes:,} bytes (serve --max-replay-requests, "
                "--max-replay-bytes)"
            )
            self.log, self.log_bytes = [], 0

    def _detach(self, reason: str) -> None:
        """This session's call killed its worker (or died with it): it is closed."""
        if self.failure is None:
            self.failure = reason
        self._ready.set()

    def begin_move(self, old: PoolWorker) -> None:
        """Its worker is being replaced: calls wait until it is restored elsewhere."""
        self.retired = old
        self.worker = None
        self._ready.clear()

    async def restore(self, worker: PoolWorker, cause: str) -> bool:
        """Rebuild the env on ``worker`` and replay the log; on any failure the session is
        closed at its next request, with the reason. ``False``: ``worker`` was stopped before
        this session was placed on it (so its retirement did not move it): the caller places
        it on another."""
        if self.closing or self.failure is not None:
            self.give_up(None)
            return True
        if self.unrestorable is not None:
            restored = f"{cause}, and this session could not be restored"
            self.give_up(f"{restored}: {self.unrestorable}")
            return True
        if not worker.accepting:  # killed between its start and now
            return False
        timeout = self.pool.limits.request_timeout_s
        self.sid = worker.adopt(self)  # no await since the check: a retirement now moves it
        why: str | None = None
        try:
            reply = await worker.request(self, self._open_body(), timeout, replay=True)
            if reply[:1] != OK:
                why = f"rebuilding its env failed: {reply[1:].decode('utf-8', 'replace')}"
            else:  # sent at once: the worker runs them in order, each under its own clock
                sent = [worker.request(self, body, timeout, True) for body in self.log]
                chain = b""
                for reply in await asyncio.gather(*sent):
                    chain = _chain(chain, reply)
                if chain != self.chain:
                    why = (
                        f"replaying its {len(self.log)} requests since its last seeded reset "
                        "gave a different reply from the first run (the env is not "
                        "deterministic given its seed and actions)"
                    )
        except Moved:
            return True  # that worker was replaced too: its retirement moves this session
        except TimeoutError:
            why = f"replaying a request took over {timeout:g} s"
        except WorkerFailed as exc:
            why = f"its replay failed: {exc.message}"
        if why is not None or self.closing:
            restored = f"{cause}, and this session could not be restored"
            self.give_up(None if why is None else f"{restored}: {why}")
            self.pool.spawn(self._close_on(worker))
            return True
        self.worker = worker
        self.retired = None
        self.pool.moved += 1
        self._ready.set()
        return True

    def give_up(self, message: str | None) -> None:
        """Not restored: closed at its next request, with ``message``."""
        if message is not None:
            self.pool.restore_failures += 1
            if self.failure is None:
                self.failure = message
        self.worker = None
        self._ready.set()

    async def _close_on(self, worker: PoolWorker) -> None:
        """Close this session's env on ``worker`` (its thread there closes it and ends)."""
        if not worker.accepting or worker.sessions.get(self.sid) is not self:
            return
        busy = any(call.runner is self for call in worker.queue)
        if not (busy and self.pool.shutting_down):  # else the worker is stopped anyway
            close = json.dumps([self.seq + 1, "close"]).encode()
            with contextlib.suppress(Moved, TimeoutError, WorkerFailed):
                await worker.request(self, close, self.pool.limits.close_timeout_s)
        if worker.sessions.get(self.sid) is self:
            del worker.sessions[self.sid]

    async def stop(self, *, graceful: bool) -> None:
        """Close the env on its worker (a call still running there goes on under its own
        timer, and the close waits for it). A session whose call killed its worker waits
        until that process is gone, so its slot stays counted until then."""
        self.closing = True
        if self.worker is not None:
            await self._close_on(self.worker)
        retired = self.retired
        if retired is not None and retired.gone is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(retired.gone)


class WorkerPool:
    """The pool's worker processes: placement, timeouts, replacement and moves.

    Args:
        make_env: builds one env in a worker (must pickle).
        env_id: the served id.
        limits: the server's limits (``pool_size``, timeouts, memory, replay bounds).
        process_lock: serialises calls into multiprocessing's process bookkeeping.
    """

    def __init__(
        self,
        make_env: Callable[[], gym.Env[str, str]],
        env_id: str,
        limits: p.ServerLimits,
        process_lock: threading.Lock,
    ) -> None:
        self.make_env = make_env
        self.env_id = env_id
        self.limits = limits
        self.size = limits.pool_size
        self.process_lock = process_lock
        self.workers: list[PoolWorker] = []
        self.moved = 0
        self.restore_failures = 0
        self.replaced = 0
        self.shutting_down = False
        """Set by the server's shutdown: closes do not wait on calls still running."""
        self._jobs: set[asyncio.Future[None]] = set()

    # -------------------------------------------------------------- placement
    async def place(self, runner: PoolRunner) -> PoolWorker | None:
        """The least-loaded worker (a new one while there are fewer than ``size``), with
        ``runner`` adopted on it; ``None`` if that worker was stopped as soon as it was up
        (the runner is then being moved like any other session of it)."""
        for _ in range(3):  # a worker killed while it starts: the next one
            if len(self.workers) < self.size:
                worker = self._launch()
            else:
                worker = min(self.workers, key=lambda w: len(w.sessions))
            runner.sid = worker.adopt(runner)
            runner.worker = worker
            with contextlib.suppress(WorkerFailed):
                await asyncio.shield(worker.ready)
            if worker.accepting:
                return worker
            if runner.retired is worker:
                return None
            worker.sessions.pop(runner.sid, None)  # it never started: try another
        raise WorkerFailed(worker.failure or "the env process is gone")

    def _launch(self) -> PoolWorker:
        """A new worker, in the list at once (so that placement counts it); it starts in
        the background (``ready``)."""
        worker = PoolWorker(self)
        self.workers.append(worker)
        self._background(self._start(worker))
        return worker

    async def _start(self, worker: PoolWorker) -> None:
        import multiprocessing

        loop = asyncio.get_running_loop()
        server_end, child_end = socket.socketpair()
        context = multiprocessing.get_context("forkserver")
        worker.process = context.Process(
            target=pool_worker_main,
            args=(child_end, self.make_env, self.env_id, self.limits),
            name=f"mte-pool {self.env_id}",
        )

        def launch() -> None:
            with self.process_lock:
                worker.process.start()

        try:
            try:
                await loop.run_in_executor(None, launch)
            finally:
                child_end.close()  # the worker has its own copy now
            await loop.connect_accepted_socket(lambda: worker, server_end)
            await asyncio.wait_for(asyncio.shield(worker.ready), self.limits.request_timeout_s)
        except Exception as exc:
            worker.failure = f"starting an env process failed: {type(exc).__name__}: {exc}"
            if not worker.ready.done():
                worker.ready.set_exception(WorkerFailed(worker.failure))
            with contextlib.suppress(ValueError):
                self.workers.remove(worker)
            worker.gone = asyncio.ensure_future(self._stop_process(worker, eof=False))
            if worker.transport is None:
                server_end.close()

    # -------------------------------------------------------------- timeouts and deaths
    def expired(self, worker: PoolWorker, call: _Call) -> None:
        """The running call's timer fired: it overran; its worker is replaced (its other
        sessions moved) and its session closed with ``TIMEOUT``."""
        if call.future.done() or not worker.accepting or not worker.queue:
            return
        if worker.queue[0] is not call:  # answered meanwhile; its successor has its own timer
            return
        timeout = call.timeout_s
        cause = (
            "its worker process was stopped because a neighbouring session's call overran "
            f"its timeout of {timeout:g} s"
        )
        self._retire(worker, {call.runner}, cause, TimeoutError())

    def lost(self, worker: PoolWorker) -> None:
        """A worker's socket closed without the server asking: it died (or broke the wire)."""
        if not worker.accepting:  # retired by the server, or died before it was up
            with contextlib.suppress(ValueError):
                self.workers.remove(worker)  # (so that no session is placed on it)
            return
        culprits: set[PoolRunner] = set()
        if worker.queue and not worker.queue[0].replay:  # the running call (it may also have
            runner = worker.queue[0].runner  # been sent to a worker already dead)
            if runner.suspect:  # it killed a worker before: this is no coincidence
                culprits.add(runner)
            else:  # moved with the others, its call sent again: judged if that one dies too
                runner.suspect = True
        self._retire(worker, culprits, None, None)

    def _retire(
        self,
        worker: PoolWorker,
        culprits: set[PoolRunner],
        cause: str | None,
        error: BaseException | None,
    ) -> None:
        """Stop ``worker`` and move every session on it but ``culprits`` to a fresh one.
        ``error`` is what the culprits' calls raise (``None``: the worker died; they get a
        ``WorkerFailed`` naming the signal or exit status once it is reaped)."""
        worker.accepting = False
        with contextlib.suppress(ValueError):
            self.workers.remove(worker)
        self.replaced += 1
        victims = [r for r in worker.sessions.values() if r not in culprits and not r.closing]
        for runner in victims:
            runner.begin_move(worker)
        for runner in culprits:
            runner.retired = worker
        calls = list(worker.queue)
        worker.queue.clear()
        worker.sessions.clear()
        for call in calls:
            if call.timer is not None:
                call.timer.cancel()
            if call.future.done():
                continue
            if call.runner in victims:
                call.future.set_exception(Moved())
            elif call.runner not in culprits:
                call.future.set_result(OK + b"null")  # a close: the env went with the worker
            elif error is not None:
                call.future.set_exception(error)
        died = [call for call in calls if call.runner in culprits and not call.future.done()]
        worker.gone = asyncio.get_running_loop().create_future()
        worker.gone.add_done_callback(_consume)
        self._background(self._after_retire(worker, died, victims, cause))

    async def _after_retire(
        self,
        worker: PoolWorker,
        died: list[_Call],
        victims: list[PoolRunner],
        cause: str | None,
    ) -> None:
        if cause is None:  # a death: name it once the process is reaped
            await wait_exited(worker.process, self.process_lock, 1.0)
            with self.process_lock:
                code = worker.process.exitcode
            note = worker.failure or (
                describe_exit(code) if code is not None else "the env process closed its socket"
            )
            for call in died:
                if not call.future.done():
                    call.future.set_exception(WorkerFailed(note))
            cause = f"its worker process died ({note}) while running a neighbouring session's call"
        stopping = asyncio.ensure_future(self._stop_process(worker, eof=False))
        gone = worker.gone

        def stopped(_: asyncio.Future[None]) -> None:
            if gone is not None and not gone.done():
                gone.set_result(None)

        stopping.add_done_callback(stopped)
        self._jobs.add(stopping)
        stopping.add_done_callback(self._jobs.discard)
        pending = victims
        why = "no fresh worker could be started"
        for _ in range(8):  # a start can fail for a passing reason (the worker was killed)
            if not pending:
                return
            fresh = self._launch()
            with contextlib.suppress(Exception):
                await asyncio.shield(fresh.ready)
            if not fresh.accepting:
                why = fresh.failure or why
                continue
            # a worker killed between its start and a session's placement does not move
            # that session (it was not on it yet): place it on the next one
            placed = await asyncio.gather(*(r.restore(fresh, cause) for r in pending))
            pending = [r for r, done in zip(pending, placed, strict=True) if not done]
        for runner in pending:
            runner.give_up(f"{cause}, and this session could not be restored: {why}")

    async def _stop_process(self, worker: PoolWorker, *, eof: bool) -> None:
        """Stop a worker's process: with ``eof`` it is asked to close its envs first (its
        socket closed); then SIGTERM, and SIGKILL after ``close_timeout_s``."""
        close_timeout = self.limits.close_timeout_s
        try:
            if worker.process is None or worker.process.pid is None:
                return
            if eof and worker.transport is not None:
                worker.transport.close()
                if await wait_exited(worker.process, self.process_lock, close_timeout):
                    return
            await terminate(worker.process, self.process_lock, close_timeout)
        finally:
            if worker.transport is not None:
                worker.transport.abort()
            with self.process_lock, contextlib.suppress(ValueError, AttributeError):
                if worker.process.exitcode is not None:
                    worker.process.close()

    # -------------------------------------------------------------- the rest
    def spawn(self, job: Coroutine[Any, Any, None]) -> None:
        """Run ``job`` in the background; :meth:`close` waits for it."""
        self._background(job)

    def _background(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(job)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def close(self) -> None:
        """Stop every worker (their envs are asked to close first)."""
        if self._jobs:
            await asyncio.gather(*list(self._jobs), return_exceptions=True)
        workers, self.workers = self.workers, []
        for worker in workers:
            worker.accepting = False
        stops = [self._stop_process(w, eof=True) for w in workers]
        retired = [w.gone for w in workers if w.gone is not None]
        await asyncio.gather(*stops, *retired, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {
            "pool_workers": len(self.workers),
            "pool_size": self.size,
            "pool_sessions_per_worker": [len(w.sessions) for w in self.workers],
            "pool_worker_pids": [w.pid for w in self.workers],
            "pool_sessions_moved": self.moved,
            "pool_restore_failures": self.restore_failures,
            "pool_workers_replaced": self.replaced,
        }
