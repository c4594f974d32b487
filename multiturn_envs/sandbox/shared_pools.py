"""The process's registry of shared pools, one per configuration.

:meth:`DockerSandbox.shared <multiturn_envs.sandbox.docker_pool.DockerSandbox.shared>` asks it
for the pool of a set of options; every env instance with the same options then shares one set
of warm containers. The registry knows pools only through the three callables it is given, so
it does not depend on the pool's module.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["SharedPools"]

P = TypeVar("P")


class SharedPools(Generic[P]):
    """The process's shared pools, one per configuration.

    Created lazily under a lock; closed at interpreter exit (registered on first use) or by
    :meth:`shutdown`. It remembers the process that made its pools: in a forked child it
    starts afresh instead of handing out (or closing) the parent's containers.

    Args:
        make: builds the shared pool for a set of options.
        closed: whether a pool was closed (a closed one is replaced on the next :meth:`get`).
        shut: closes a pool for good (its containers are removed).
    """

    def __init__(
        self,
        make: Callable[[dict[str, Any]], P],
        closed: Callable[[P], bool],
        shut: Callable[[P], None],
    ) -> None:
        self._make, self._closed, self._shut = make, closed, shut
        self._lock = threading.Lock()
        self._pools: dict[tuple[tuple[str, Any], ...], P] = {}
        self._pid = os.getpid()
        self._at_exit = False

    def get(self, options: dict[str, Any]) -> P:
        """The shared pool for ``options``, made on first use (or after it was closed)."""
        key = tuple(sorted(options.items()))
        with self._lock:
            if self._pid != os.getpid():
                self._pools, self._pid, self._at_exit = {}, os.getpid(), False
            pool = self._pools.get(key)
            if pool is None or self._closed(pool):
                pool = self._make(options)
                self._pools[key] = pool
                if not self._at_exit:
                    atexit.register(self.shutdown)
                    self._at_exit = True
            return pool

    def shutdown(self) -> None:
        """Close every pool made in this process (a forked child's registry closes none)."""
        with self._lock:
            pools = list(self._pools.values()) if self._pid == os.getpid() else []
            self._pools = {}
        for pool in pools:
            self._shut(pool)
