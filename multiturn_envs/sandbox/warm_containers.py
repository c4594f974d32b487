"""WarmContainers: fresh single-use containers, made ahead of time by a background thread.

Why: creating a hardened container and starting what runs in it costs ~0.3-0.5 s; an episode
that starts on one made ahead of time pays only for what is task-specific (docs/envs/
terminal.md). Each container serves ONE episode (or one restored snapshot) and is then removed,
so nothing an episode does survives it. Removal also happens on the background thread, off
the caller's path. Containers are made by the caller's ``make`` (e.g.
:meth:`~multiturn_envs.sandbox.docker_pool.DockerSandbox.hardened_container`, which labels
them, so the sandbox's orphan reaper removes what a killed process leaves) and prepared by
``prepare`` (e.g. start a shell in it).
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class WarmContainers(Generic[T]):
    """Keeps ``size`` prepared containers ready; :meth:`take` hands one out and makes another.

    Args:
        make: creates a container (an object with ``.id`` and ``.remove(force=, v=)``).
        prepare: turns a new container into what :meth:`take` returns (runs on the thread).
        size: containers kept ready (0: each :meth:`take` makes one on the caller's thread).
    """

    def __init__(
        self,
        make: Callable[[], Any],
        prepare: Callable[[Any], T],
        size: int = 1,
    ) -> None:
        self._make = make
        self._prepare = prepare
        self.size = max(0, int(size))
        self._ready: queue.Queue[tuple[Any, T]] = queue.Queue()
        self._doomed: queue.Queue[Any] = queue.Queue()
        self._wanted = threading.Semaphore(self.size)
        self._lock = threading.Lock()
        self._live: dict[str, Any] = {}
        self._closed = threading.Event()
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        if self.size:
            self._threads.append(threading.Thread(target=self._fill, daemon=True))
        self._threads.append(threading.Thread(target=self._reap, daemon=True))
        for thread in self._threads:
            thread.start()
        atexit.register(self.close)

    # ------------------------------------------------------------------ threads
    def _new(self) -> tuple[Any, T]:
        container = self._make()
        with self._lock:
            self._live[container.id] = container
        try:
            return container, self._prepare(container)
        except BaseException:
            self.discard(container)
            raise

    def _fill(self) -> None:
        while not self._closed.is_set():
            if not self._wanted.acquire(timeout=0.2):
                continue
            if self._closed.is_set():
                return
            try:
                self._ready.put(self._new())
                self._error = None
            except Exception as exc:  # reported by take(), retried after a pause
                self._error = exc
                self._wanted.release()
                self._closed.wait(1.0)

    def _reap(self) -> None:
        while True:
            container = self._doomed.get()
            if container is None:
                return
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)

    # ------------------------------------------------------------------ API
    def take(self, timeout_s: float = 60.0) -> tuple[Any, T]:
        """A prepared container for the caller alone; it must come back through
        :meth:`discard`."""
        if self._closed.is_set():
            raise RuntimeError("these warm containers are closed")
        if not self.size:
            return self._new()
        try:
            item = self._ready.get(timeout=timeout_s)
        except queue.Empty:
            why = f": {self._error}" if self._error is not None else ""
            raise RuntimeError(f"no warm container became ready in {timeout_s:g} s{why}") from None
        self._wanted.release()
        return item

    def discard(self, container: Any) -> None:
        """Remove a container (on the background thread)."""
        with self._lock:
            self._live.pop(container.id, None)
        self._doomed.put(container)

    def ready_count(self) -> int:
        """Containers ready to be taken now."""
        return self._ready.qsize()

    def live_ids(self) -> list[str]:
        """Ids of the containers made here and not yet discarded (ready or handed out)."""
        with self._lock:
            return list(self._live)

    def close(self) -> None:
        """Remove every container made here; idempotent. Waits for the removals (bounded)."""
        if self._closed.is_set():
            return
        self._closed.set()
        atexit.unregister(self.close)
        for thread in self._threads[:-1]:
            thread.join(timeout=60)
        with self._lock:
            leftover = list(self._live.values())
            self._live.clear()
        for container in leftover:
            self._doomed.put(container)
        self._doomed.put(None)
        self._threads[-1].join(timeout=60)
