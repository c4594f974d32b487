"""WarmContainers: fresh single-use boxes, made ahead of time by a background thread.

Why: creating a hardened container and starting what runs in it costs ~0.3-0.5 s; an episode
that starts on one made ahead of time pays only for what is task-specific (docs/envs/
terminal.md). Each box serves ONE episode (or one restored snapshot) and is then closed, so
nothing an episode does survives it. Boxes are made by the caller's ``make`` (a provider's
``create``, which labels them, so the orphan reaper removes what a killed process leaves) and
prepared by ``prepare`` (e.g. start a shell in it); their removal is their engine's reaper's
(:mod:`.docker_engine`), off the caller's path. A box whose engine went away while it waited
is never handed out.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from multiturn_envs.sandbox.provider import Box

T = TypeVar("T")

__all__ = ["WarmContainers", "wait_removed"]


def wait_removed(boxes: list[Box], timeout_s: float = 60.0) -> None:
    """Wait (bounded) until the engines' reapers removed ``boxes`` (closed already)."""
    deadline = time.monotonic() + timeout_s
    for box in boxes:
        owner = getattr(box, "owner", None)
        while owner is not None and time.monotonic() < deadline:
            if box.id not in owner.box_ids() or owner.gone:
                break
            time.sleep(0.02)


class WarmContainers(Generic[T]):
    """Keeps ``size`` prepared boxes ready; :meth:`take` hands one out and makes another.

    Args:
        make: creates a box.
        prepare: turns a new box into what :meth:`take` returns (runs on the thread).
        size: boxes kept ready (0: each :meth:`take` makes one on the caller's thread).
    """

    def __init__(self, make: Callable[[], Box], prepare: Callable[[Box], T], size: int = 1) -> None:
        self._make = make
        self._prepare = prepare
        self.size = max(0, int(size))
        self._ready: queue.Queue[tuple[Box, T]] = queue.Queue()
        self._wanted = threading.Semaphore(self.size)
        self._lock = threading.Lock()
        self._live: dict[str, Box] = {}
        self._closed = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if self.size:
            self._thread = threading.Thread(target=self._fill, daemon=True)
            self._thread.start()
        atexit.register(self.close)

    # ------------------------------------------------------------------ the filler
    def _new(self) -> tuple[Box, T]:
        box = self._make()
        with self._lock:
            self._live[box.id] = box
        try:
            return box, self._prepare(box)
        except BaseException:
            self.discard(box)
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

    # ------------------------------------------------------------------ API
    def take(self, timeout_s: float = 60.0) -> tuple[Box, T]:
        """A prepared box for the caller alone; it must come back through :meth:`discard`.
        Boxes whose engine is marked gone are dropped on the way."""
        if self._closed.is_set():
            raise RuntimeError("these warm containers are closed")
        if not self.size:
            return self._new()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                item = self._ready.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                why = f": {self._error}" if self._error is not None else ""
                raise RuntimeError(
                    f"no warm container became ready in {timeout_s:g} s{why}"
                ) from None
            self._wanted.release()
            if getattr(item[0], "gone", False):
                self.discard(item[0])
                continue
            return item

    def discard(self, box: Box) -> None:
        """Close a box (its engine's reaper removes it)."""
        with self._lock:
            self._live.pop(box.id, None)
        box.close()

    def ready_count(self) -> int:
        """Boxes ready to be taken now."""
        return self._ready.qsize()

    def live_ids(self) -> list[str]:
        """Ids of the boxes made here and not yet discarded (ready or handed out)."""
        with self._lock:
            return list(self._live)

    def close(self) -> None:
        """Close every box made here and wait (bounded) for their removal; idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        atexit.unregister(self.close)
        if self._thread is not None:
            self._thread.join(timeout=60)
        with self._lock:
            leftover = list(self._live.values())
            self._live.clear()
        for box in leftover:
            with contextlib.suppress(Exception):
                box.close()
        wait_removed(leftover)
