"""Where a session's env runs: its own process, or a thread of the server (a pool of shared
worker processes, the default for envs without blocking I/O, is :mod:`.pool`; ``auto``
chooses: :func:`resolve_isolation`).

Why a process. An env step runs whatever the agent's text makes it run: a regex that
backtracks for minutes while holding the GIL, a SQLite call that segfaults, an allocation of
gigabytes. Run on a thread of the server, any of these freezes every client, the request
timeouts and SIGTERM, or kills the server. In a process of its own (:class:`ProcessRunner`),
the event loop never runs env code, a step past its timeout is stopped (SIGTERM, then SIGKILL)
and its slot freed, a crash takes only that session, and the process lives under an address
space limit. :class:`ThreadRunner` is the old way (``serve --isolation thread``): no process
per session, but nothing can stop a runaway step.

The wire between the server and a worker process (:mod:`.frames`): frames of a 4-byte
big-endian length and a body, on a socket pair. A request is JSON ``[op, *args]``
(``reset``, ``step``, ``state``, ``tool``, ``close``); a reply is one tag byte and a body:
``o`` + the result's JSON text (the server wraps it into its frame without parsing it), ``e`` +
``{"code", "message"}`` (a :class:`~.protocol.ProtocolError`: the session lives on), ``c`` + a
message (the env crashed: the session is closed). Only JSON crosses the socket once the worker
runs, so a worker that an agent took over cannot reach into the server through it.

Workers are forked by multiprocessing's fork server (:func:`prepare`), a small process that
imported the package once: a session starts in milliseconds, and the worker does not inherit
the server's sockets, threads or event loop. Each worker dies with the fork server
(``PR_SET_PDEATHSIG``), and the fork server with the server, so no worker outlives its server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, NamedTuple, Protocol, cast

import gymnasium as gym

from multiturn_envs.episode import make_env
from multiturn_envs.server import protocol as p
from multiturn_envs.server.frames import (
    CHECKPOINT,
    CRASH,
    ERROR,
    HEADER,
    OK,
    READ_ERROR,
    READ_OK,
    FrameReader,
    frame,
    send_frame,
)
from multiturn_envs.server.session import EnvCrashed, EnvSession

Isolation = Literal["auto", "pool", "process", "thread"]
ISOLATIONS: tuple[str, ...] = ("auto", "pool", "process", "thread")
"""Where sessions' envs run: ``pool`` (a few worker processes hosting several sessions each,
:mod:`.pool`), ``process`` (a worker process per session), ``thread`` (threads of the
server), or ``auto`` (:func:`resolve_isolation`)."""


def resolve_isolation(isolation: str, blocking_io: bool) -> Isolation:
    """``auto``: ``pool`` for an env whose steps do no blocking I/O, else ``process``.

    Why: a pool worker hosts several sessions, so what one of them holds on to while it
    waits (DeepCoder's and Terminal's sandbox containers, a process) would be shared by the
    worker's envs and lost with it when a neighbour's step is stopped; and such envs' steps
    are long (10-100 ms in a container), where a process per session costs nothing that
    matters. Cheap in-memory envs (FrozenLake, InterCode-SQL, BFCL) are where a process per
    session costs most (docs/ecosystem.md) and replay cheaply when moved.
    """
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation is one of {', '.join(ISOLATIONS)}; got {isolation!r}")
    if isolation == "auto":
        return "process" if blocking_io else "pool"
    return cast(Isolation, isolation)


_STOPPED_EXIT = 3


class WorkerFailed(Exception):
    """The worker is gone or broke the wire; the session must be closed.

    Attributes:
        message: what happened, for the client (includes the signal when it was killed).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class FactoryFailed(Exception):
    """The env could not be built (its message is the client's ``FACTORY_ERROR``)."""


def make_registered(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env[str, str]:
    """``gym.make(env_id, **env_kwargs)`` without the checker (:func:`~multiturn_envs.episode.
    make_env`): the default factory (picklable, for the workers)."""
    return make_env(env_id, env_kwargs)


# ------------------------------------------------------------------------------ one request
def handle(
    session: EnvSession,
    op: str,
    args: list[Any],
    max_reply_bytes: int,
    seq: int | None = None,
    checkpoints: bool = False,
) -> bytes:
    """Run one request on ``session``: the tagged reply (tag byte + body).

    ``seq``: the request's number, which keys the ids it draws (default: the next one).
    ``checkpoints`` (the pool's workers, which replay logs): tag a reset that leaves the session
    at a start point (a seeded reset, no snapshot kept) :data:`~.frames.CHECKPOINT` instead of
    :data:`~.frames.OK`, and the reply to a request that changed nothing
    (:attr:`EnvSession.changed`) :data:`~.frames.READ_OK` / :data:`~.frames.READ_ERROR`.
    """
    session.seq = session.seq + 1 if seq is None else seq
    session.start_point = False
    session.changed = False
    reply = _run(session, op, args, max_reply_bytes)
    if not checkpoints:
        return reply
    tag = reply[:1]
    if tag == OK and session.start_point and not session.snapshots and op == "reset":
        return CHECKPOINT + reply[1:]
    if not session.changed and tag in (OK, ERROR):
        return (READ_OK if tag == OK else READ_ERROR) + reply[1:]
    return reply


def _run(session: EnvSession, op: str, args: list[Any], max_reply_bytes: int) -> bytes:
    try:
        if op == "reset":
            result: Any = session.reset(args[0])
        elif op == "step":
            result = session.step(args[0])
        elif op == "state":
            result = session.state()
        elif op == "tool":
            result = session.call_tool(args[0], args[1])
        elif op == "rpc":  # MCP JSON-RPC: tools/list, tools/call (an env tool: a turn)
            result = session.rpc(args[0])
        else:
            raise p.ProtocolError(p.UNKNOWN_TYPE, f"no operation {op!r}")
        body = p.dumps(result).encode("utf-8", "backslashreplace")
    except p.ProtocolError as exc:
        return ERROR + _error_body(exc.code, exc.message)
    except EnvCrashed as exc:
        return CRASH + str(exc).encode("utf-8", "backslashreplace")[:4000]
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"[:2000]
        if op == "tool":  # an oracle hook refusing (reset needed, episode over): no crash
            return ERROR + _error_body(p.EXECUTION_ERROR, message)
        return CRASH + f"{op} raised {message}".encode("utf-8", "backslashreplace")
    if len(body) > max_reply_bytes:
        message = f"the reply is {len(body):,} bytes, over the limit of {max_reply_bytes:,}"
        if op == "step" and _is_tool_call(args[0]):  # a tool's result: that call fails
            name = str(args[0].get("tool_name"))
            error = p.tool_payload(name, None, ("execution_error", message), session.base.done)
            return OK + p.dumps(error).encode("utf-8")
        if op == "rpc":  # a JSON-RPC error for that call; the session lives on
            request_id = args[0].get("id") if isinstance(args[0], dict) else None
            error = {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": {"code": -32000, "message": message},
            }
            return OK + p.dumps(error).encode("utf-8")
        if op in ("reset", "step"):  # the env moved on; the client cannot follow it
            return CRASH + message.encode()
        return ERROR + _error_body(p.TOO_LARGE, message)
    return OK + body


def _is_tool_call(data: Any) -> bool:
    return isinstance(data, dict) and data.get("type") in ("list_tools", "call_tool")


def _error_body(code: str, message: str) -> bytes:
    return json.dumps({"code": code, "message": message}).encode("utf-8", "backslashreplace")


# ------------------------------------------------------------------------------ the worker
class Stopped(BaseException):
    """Raised in the worker by SIGTERM: the server gave up on the current call."""


def on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stopped


def die_with_parent() -> None:
    """SIGKILL this worker when the fork server exits (Linux); the fork server exits with the
    server once no process holds its liveness pipe, so this worker lets go of its copy."""
    with contextlib.suppress(Exception):
        from multiprocessing import forkserver

        server = getattr(forkserver, "_forkserver", None)
        fd = getattr(server, "_forkserver_alive_fd", None)
        if fd is not None:
            os.close(fd)
            setattr(server, "_forkserver_alive_fd", None)  # noqa: B010  (a private attribute)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PDEATHSIG
            if os.getppid() == 1:  # the parent was already gone
                os._exit(_STOPPED_EXIT)


def limit_memory(limit_bytes: int) -> None:
    if limit_bytes > 0:
        import resource

        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def worker_main(
    sock: socket.socket,
    make_env: Callable[[], gym.Env[str, str]],
    env_id: str,
    limits: p.ServerLimits,
) -> None:
    """The worker process: build the env, then answer requests until ``close`` or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
    signal.signal(signal.SIGTERM, on_sigterm)
    die_with_parent()
    limit_memory(limits.worker_memory_bytes)
    session: EnvSession | None = None
    try:
        try:
            session = EnvSession(make_env(), env_id, limits)
        except Exception as exc:
            message = f"building {env_id} failed: {type(exc).__name__}: {exc}"[:4000]
            send_frame(sock, CRASH + message.encode("utf-8", "backslashreplace"))
            return
        send_frame(sock, OK + b"null")
        requests = FrameReader(sock)
        while True:
            request = requests.next()
            if request is None:
                return  # the server closed the socket (or is gone)
            op, *args = json.loads(request)
            if op == "close":
                return
            send_frame(sock, handle(session, op, args, limits.max_reply_bytes))
    except (Stopped, OSError):
        pass
    finally:
        signal.signal(signal.SIGTERM, on_sigterm)  # a second SIGTERM stops a slow close
        with contextlib.suppress(Stopped, Exception):
            if session is not None:
                session.close()
            # a multiprocessing child skips atexit; run it, so that what the env registered
            # there (a sandbox pool removing its containers) runs as at a normal exit
            import atexit

            atexit._run_exitfuncs()
        with contextlib.suppress(OSError):
            sock.close()


class FirstReset(NamedTuple):
    """What :func:`first_reset` learned about the served env."""

    modules: list[str]
    """The modules its first reset imported (the fork server imports them once)."""
    warmable: bool
    """Whether the fork server may run it before forking (:mod:`.forkserver_warmup`): its
    steps do no blocking I/O (``blocking_io``: no containers or processes, which the fork
    server would hold client sockets to and every worker inherit) and no thread it started
    was still alive after ``close`` (a fork with a thread alive may copy a held lock)."""
    blocking_io: bool = False
    """The env's ``blocking_io`` (what ``isolation="auto"`` decides by)."""


def first_reset(make_env: Callable[[], gym.Env[str, str]]) -> FirstReset:
    """Build an env, reset it on its first task and close it, here; what that imported.

    What an env loads lazily on first use (a SQL parser, a tokenizer) would otherwise be
    imported by every worker, at every session's first reset (InterCode-SQL: ~0.2 s of CPU a
    session). :func:`prepare` has the fork server import these modules once instead. The env
    is the served one with trusted arguments, reset on its first task; an exception here is the
    env's (a bad kwarg) and propagates.
    """
    from multiturn_envs.wrappers.turn_budget import text_env_of

    before = set(sys.modules)
    threads = set(threading.enumerate())
    env = make_env()
    try:
        base = text_env_of(env)
        tasks = base.task_ids()
        env.reset(seed=0, options={"task_id": str(tasks[0])} if tasks else None)
    finally:
        env.close()
    modules = sorted(name for name in set(sys.modules) - before if not name.startswith("_"))
    left = any(t.is_alive() for t in set(threading.enumerate()) - threads)
    return FirstReset(modules, not base.blocking_io and not left, base.blocking_io)


def blocks_on_io(make_env: Callable[[], gym.Env[str, str]]) -> bool:
    """Whether the envs ``make_env`` builds wait on I/O (``blocking_io``), what
    ``isolation="auto"`` needs when no :func:`first_reset` ran. Read from the env's class
    when the factory names one (a class, :func:`make_registered` of an id, or a
    ``functools.partial`` of either); otherwise one env is built, here, and closed."""
    import functools

    from gymnasium.envs.registration import load_env_creator

    from multiturn_envs.core import blocks_on_io as env_blocks

    target: Any = make_env
    args: tuple[Any, ...] = ()
    while isinstance(target, functools.partial):
        args = target.args + args
        target = target.func
    if target is make_registered and args and isinstance(args[0], str):
        import multiturn_envs  # noqa: F401  (registers the MT/* ids)

        entry = gym.spec(args[0]).entry_point
        target = load_env_creator(entry) if isinstance(entry, str) else entry
    if isinstance(target, type):
        return bool(getattr(target, "blocking_io", False))
    env = make_env()
    try:
        return env_blocks(env)
    finally:
        env.close()


def prepare(
    env_id: str | None = None,
    modules: Sequence[str] = (),
    warm: Callable[[], gym.Env[str, str]] | None = None,
) -> None:
    """Start the fork server with the package, ``env_id``'s module, ``modules`` (what
    :func:`first_reset` imported) and the main module imported, and wait until it forks:
    workers then start in milliseconds, and the first session does not pay the imports under
    its request timeout. With ``warm`` (the served env's factory; only for an env that
    :func:`first_reset` found ``warmable``), the fork server also resets an env on
    each task first, so that every worker inherits the caches that fills
    (:mod:`.forkserver_warmup`). Call before serving (idempotent; blocks ~1 s the first time,
    up to :data:`~.forkserver_warmup.BUDGET_S` more with ``warm``).

    As with any multiprocessing start method but fork, a script that serves envs in-process
    (``serve(...)``, ``create_app(...)``) needs the ``if __name__ == "__main__":`` guard: the
    fork server imports the main module once (``multiturn-envs serve`` needs nothing).
    """
    import multiprocessing

    preload = ["__main__", "multiturn_envs", "multiturn_envs.server.worker"]
    if env_id is not None:
        spec = gym.spec(env_id) if env_id in gym.registry else None
        entry = getattr(spec, "entry_point", None)
        if isinstance(entry, str):
            preload.append(entry.partition(":")[0])
    preload += [name for name in modules if name not in preload]
    preload.append("multiturn_envs.server.forkserver_warmup")  # last: warms, freezes the heap
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload)
    from multiturn_envs.server import forkserver_warmup as warmup

    # the fork server inherits the environment when it starts (a fork server already
    # running ignores both)
    os.environ[warmup.WARM_UP_VAR] = warmup.encode_factory(warm)
    try:
        probe = context.Process(target=_ready, name="mte-env warm-up")
        probe.start()
    finally:
        os.environ.pop(warmup.WARM_UP_VAR, None)
    probe.join()
    probe.close()


def _ready() -> None:
    """The warm-up worker: exits at once (its start proves the fork server is ready)."""


# ------------------------------------------------------------------------------ the server's side
class EnvRunner(Protocol):
    """Where one session's env runs; the manager talks to it through these calls only."""

    async def start(self) -> None:
        """Build the env (``FactoryFailed`` if it cannot be built)."""

    async def call(self, op: str, args: list[Any], timeout_s: float) -> bytes:
        """One request; the tagged reply. ``TimeoutError`` past ``timeout_s`` (waiting for an
        earlier request of the session included), ``WorkerFailed`` if the env is gone."""

    async def stop(self, *, graceful: bool) -> None:
        """Close the env: ``graceful`` asks it to close; otherwise it is stopped mid-call."""


class _Replies(asyncio.Protocol):
    """The server's end of a worker's socket: reassembles reply frames."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.buffer = bytearray()
        self.waiter: asyncio.Future[bytes] | None = None
        self.failure: WorkerFailed | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= HEADER:
            size = int.from_bytes(buffer[:HEADER], "big")
            if size > self.max_bytes + 1:
                self._fail(f"the env process sent a reply of {size:,} bytes (limit exceeded)")
                if self.transport is not None:
                    self.transport.abort()
                return
            if len(buffer) < HEADER + size:
                return
            body = bytes(buffer[HEADER : HEADER + size])
            del buffer[: HEADER + size]
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(body)
            # else: the answer to a call given up on; that session is being stopped

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail("the env process closed its connection")

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = WorkerFailed(message)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(self.failure)


def describe_exit(code: int) -> str:
    """What a worker's exit status says, for the client (a signal by its name)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the env process was killed by {name}"
    return f"the env process exited with status {code}"


async def wait_exited(process: Any, process_lock: threading.Lock, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for a started ``multiprocessing`` process to exit (on its
    sentinel: no thread, no polling); whether it has."""
    with process_lock:
        if process.exitcode is not None:
            return True
        sentinel = process.sentinel
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(sentinel, ready)
    try:
        await asyncio.wait_for(gone, timeout_s)
    except asyncio.TimeoutError:
        pass
    finally:
        loop.remove_reader(sentinel)
    with process_lock:
        return bool(process.exitcode is not None)


async def terminate(process: Any, process_lock: threading.Lock, grace_s: float) -> None:
    """Stop a started ``multiprocessing`` process that did not exit when asked: SIGTERM (a
    worker's handler ends the call it is in), then SIGKILL if it is still there after
    ``grace_s``; waits (bounded) for its exit."""
    if _signal_running(process, process_lock, signal.SIGTERM) and await wait_exited(
        process, process_lock, grace_s
    ):
        return
    _signal_running(process, process_lock, signal.SIGKILL)
    await wait_exited(process, process_lock, 10.0)


def _signal_running(process: Any, process_lock: threading.Lock, signum: int) -> bool:
    """Send ``signum`` to ``process`` if it is still running; whether it was."""
    with process_lock:
        if process.exitcode is not None or process.pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)
        return True


def _expire(waiter: asyncio.Future[bytes]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class ProcessRunner:
    """A session's env in a worker process of its own.

    Args:
        make_env: builds the env in the worker (must pickle: a module-level function or class,
            or a ``functools.partial`` of one).
        env_id: reported by ``describe``.
        limits: the server's limits (``worker_memory_bytes``, ``max_reply_bytes``,
            ``close_timeout_s``).
        process_lock: serialises this server's calls into multiprocessing's process
            bookkeeping, which the executor thread (start) and the event loop (exit, kill)
            both reach.
    """

    def __init__(
        self,
        make_env: Callable[[], gym.Env[str, str]],
        env_id: str,
        limits: p.ServerLimits,
        process_lock: threading.Lock,
    ) -> None:
        import multiprocessing

        self.limits = limits
        self._lock = asyncio.Lock()  # one request at a time
        self._process_lock = process_lock
        self._server_end, child_end = socket.socketpair()
        self._child_end: socket.socket | None = child_end
        context = multiprocessing.get_context("forkserver")
        self.process = context.Process(
            target=worker_main,
            args=(child_end, make_env, env_id, limits),
            name=f"mte-env {env_id}",
        )
        self._replies = _Replies(limits.max_reply_bytes)
        self._started = False
        self.in_call = False  # a request was sent and its reply has not come

    @property
    def pid(self) -> int | None:
        return self.process.pid

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def launch() -> None:
            with self._process_lock:
                self.process.start()

        try:
            await loop.run_in_executor(None, launch)
            self._started = True
        finally:
            if self._child_end is not None:
                self._child_end.close()  # the worker has its own copy now
                self._child_end = None
        await loop.connect_accepted_socket(lambda: self._replies, self._server_end)
        reply = await self._exchange(None, loop.time() + self.limits.request_timeout_s)
        if reply[:1] != OK:
            raise FactoryFailed(reply[1:].decode("utf-8", "replace"))

    async def call(self, op: str, args: list[Any], timeout_s: float) -> bytes:
        request = json.dumps([op, *args], ensure_ascii=False).encode("utf-8", "backslashreplace")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self._lock.locked():  # an earlier request of this session is still running
            await asyncio.wait_for(self._lock.acquire(), timeout_s)
        else:
            await self._lock.acquire()
        try:
            return await self._exchange(request, deadline)
        finally:
            self._lock.release()

    async def _exchange(self, request: bytes | None, deadline: float) -> bytes:
        """Send ``request`` (``None``: wait for the greeting) and wait for its reply until
        ``deadline`` (a timer on the reply's future: no task per call)."""
        replies = self._replies
        if replies.failure is not None:
            raise WorkerFailed(self._death_note(replies.failure.message))
        if self.in_call:  # its late reply would be taken for this one's
            raise WorkerFailed("the env is still inside a call that timed out")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bytes] = loop.create_future()
        replies.waiter = waiter
        if request is not None:
            assert replies.transport is not None
            replies.transport.write(frame(request))
        self.in_call = True
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            reply = await waiter
        except WorkerFailed as exc:
            raise WorkerFailed(await self._wait_death_note(exc.message)) from None
        finally:
            timer.cancel()
            replies.waiter = None
        self.in_call = False  # only a reply ends a call: a timeout leaves it running
        return reply

    async def _wait_death_note(self, message: str) -> str:
        await self._exited(1.0)  # the socket closes a moment before the exit is reported
        return self._death_note(message)

    def _death_note(self, message: str) -> str:
        with self._process_lock:
            code = self.process.exitcode if self._started else None
        return message if code is None else describe_exit(code)

    async def stop(self, *, graceful: bool) -> None:
        transport = self._replies.transport
        try:
            if not self._started:
                return
            # a worker still inside a call never reads a close request: stop it at once
            if (
                graceful
                and not self.in_call
                and transport is not None
                and not transport.is_closing()
            ):
                request = json.dumps(["close"]).encode()
                transport.write(frame(request))
                if await self._exited(self.limits.close_timeout_s):
                    return
            await terminate(self.process, self._process_lock, self.limits.close_timeout_s)
        finally:
            if transport is not None:
                transport.abort()
            else:
                self._server_end.close()
            self._reap()

    async def _exited(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the worker to exit; whether it has."""
        return await wait_exited(self.process, self._process_lock, timeout_s)

    def _reap(self) -> None:
        with self._process_lock, contextlib.suppress(ValueError):
            if self.process.exitcode is not None:
                self.process.close()


class ThreadRunner:
    """A session's env on a thread of the server (``isolation="thread"``).

    A step past its timeout cannot be stopped: its session is closed once the step returns,
    and its slot stays counted until then. For trusted agents, or for envs that need to share
    one in-process resource between sessions (DeepCoder's shared sandbox pool).
    """

    def __init__(
        self, make_env: Callable[[], gym.Env[str, str]], env_id: str, limits: p.ServerLimits
    ) -> None:
        self.make_env = make_env
        self.env_id = env_id
        self.limits = limits
        self.executor = ThreadPoolExecutor(1, "mte-session")
        self.session: EnvSession | None = None
        self.pid: int | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def build() -> EnvSession:
            return EnvSession(self.make_env(), self.env_id, self.limits)

        try:
            self.session = await loop.run_in_executor(self.executor, build)
        except Exception as exc:
            raise FactoryFailed(
                f"building {self.env_id} failed: {type(exc).__name__}: {exc}"[:4000]
            ) from None

    async def call(self, op: str, args: list[Any], timeout_s: float) -> bytes:
        session = self.session
        if session is None:
            raise WorkerFailed("the env was never built")
        loop = asyncio.get_running_loop()
        limit = self.limits.max_reply_bytes
        # shielded: a timeout leaves the call running on its thread, and the close queues
        # behind it
        job = loop.run_in_executor(self.executor, handle, session, op, args, limit)
        return await asyncio.wait_for(asyncio.shield(job), timeout_s)

    async def stop(self, *, graceful: bool) -> None:
        session = self.session
        loop = asyncio.get_running_loop()

        def close() -> None:
            if session is not None:
                session.close()

        try:
            await loop.run_in_executor(self.executor, close)
        except Exception:  # a failing close must not keep the slot or stop the server
            pass
        finally:
            self.executor.shutdown(wait=False)
