"""One call at a time per env from event loops: :class:`StepGate`, the env's turnstile.

Why. An env is a state machine: two steps at once corrupt it. A synchronous caller cannot start
a second step before the first returns, but the async API can (:func:`~multiturn_envs.core.
astep_env`): ``asyncio.gather`` of three ``astep`` calls on one env, or an ``astep`` cancelled
by ``asyncio.wait_for`` whose worker thread goes on while the next ``astep`` starts beside it
(the episode then reached turn 2 of a 1-turn budget). A thread cannot be stopped, so a
cancelled call's step cannot be interrupted either: the gate makes the next call wait for it.

The rule, for every call that goes through a gate (``areset``/``astep``/``aclose`` and their
``*_env`` forms):

* calls run one at a time, in the order they arrived (first come, first served, across event
  loops and threads: the gate is a ``threading`` object, so an env used from one loop and then
  another, ``asyncio.run`` after ``asyncio.run``, keeps one queue);
* a call cancelled while it waits for its turn never runs;
* a call cancelled while its step runs in a worker thread keeps the gate until the step has
  returned, so the step completes before the next call starts (its turn counts: the env's
  history shows it, and the budget holds: a next step past the budget raises
  :class:`~multiturn_envs.errors.EpisodeOver` as any step after the episode's end does);
* a call cancelled after it was handed the gate but before its thread started never runs and
  hands the gate on.

Serialising rather than refusing: a caller that gathers steps or retries after a timeout gets
the steps in order with the env consistent, where a refusal would turn the timeout it already
handles into a second error. A synchronous ``reset``/``step`` that arrives while an async call
holds the gate (from another thread, or queued on the loop) cannot wait (on a loop thread that
would deadlock), so it is refused with :class:`~multiturn_envs.errors.EnvBusy`; ``close``
waits for a step running in a worker thread, so that a sandbox is never pulled from under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["StepGate"]


class StepGate:
    """The turnstile of one env: :meth:`acquire` (async, first come first served),
    :meth:`release` (from any thread), :meth:`run_in_thread` (a call that keeps the gate until
    its thread returns, even when the awaiting call is cancelled).

    ``held`` and ``owner`` are read without the lock by the env's synchronous guard
    (:meth:`busy_for_caller`): a racy read can only see a call that has just started or just
    ended, and either way the caller is not the one running it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self.held = False
        """Whether a call holds the gate (running, or handed the gate and about to run)."""
        self.owner: int | None = None
        """The thread running the holder's env code right now (``None`` between calls and
        while the gate is handed over)."""
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    def __deepcopy__(self, memo: dict[int, Any]) -> StepGate:
        return StepGate()  # a copy of an env is another env: its own, idle gate

    def __reduce__(self) -> tuple[type[StepGate], tuple[()]]:
        return (StepGate, ())

    # ------------------------------------------------------------------ holding it
    async def acquire(self) -> None:
        """Wait for the gate (in arrival order). A call cancelled while it waits leaves the
        queue; one cancelled just as it was handed the gate hands it on."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self.held and not self._waiters:
                self.held = True
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.done() and not waiter.cancelled()
                if not granted:  # else popped: the grant, on its way, finds it cancelled
                    with contextlib.suppress(ValueError):
                        self._waiters.remove((loop, waiter))
            if granted:
                self.release()
            raise

    def release(self) -> None:
        """End the holder's call: hand the gate to the longest waiter (on its own loop), or
        leave it free. Safe from any thread."""
        with self._lock:
            self.owner = None
            self._ended.notify_all()
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(self._grant, waiter)
                except RuntimeError:  # its loop is closed: nobody waits there any more
                    continue
                return  # still held: handed over
            self.held = False

    def _grant(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled on its way: the next one gets it
            self.release()
        else:
            waiter.set_result(None)

    def enter(self) -> None:
        """The holder's env code starts on this thread (the guard lets it through)."""
        self.owner = threading.get_ident()

    # ------------------------------------------------------------------ what runs under it
    async def run_in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the loop's default executor, by the holder of the gate;
        the gate is released when ``fn`` returns, in its thread, even if this call was
        cancelled meanwhile (the step completes before the next call starts); if the call is
        cancelled before the thread took the work, ``fn`` never runs and the gate is released
        here."""
        started = abandoned = False

        def work() -> T | None:
            nonlocal started
            with self._lock:
                if abandoned:
                    return None
                started = True
                self.owner = threading.get_ident()
            try:
                return fn(*args, **kwargs)
            finally:
                self.release()

        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        try:
            future = loop.run_in_executor(None, context.run, work)
        except BaseException:  # an executor shut down: nothing will run
            self.release()
            raise
        try:
            result = await future
        except asyncio.CancelledError:
            with self._lock:
                release = not started
                abandoned = release
            if release:
                self.release()
            raise
        return result  # type: ignore[return-value]  # ``None`` only for abandoned work

    def wait_running(self) -> None:
        """Block until no holder's env code runs on another thread (``close`` waits so; it
        never waits for a queued call, which may need the caller's own loop to start)."""
        me = threading.get_ident()
        with self._lock:
            while self.owner is not None and self.owner != me:
                self._ended.wait()

    def busy_for_caller(self) -> bool:
        """Whether a call holds the gate and the calling thread is not the one running it: a
        synchronous ``reset``/``step`` now would run beside it."""
        return self.held and self.owner != threading.get_ident()
