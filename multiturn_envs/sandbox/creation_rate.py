"""A per-engine limit on container creations per second, shared by every process of this machine.

Why: an engine asked for more creations than it completes queues them inside itself, where no
caller can see or cancel them, and every exec of every other user of that engine slows down
(a creation costs the engine ~50 ms of CPU; notes/sandbox-and-deepcoder.md). A harness with
many processes (``--workers``, Ray workers on one node, a server's workers) must share one
budget per engine, so the limit lives in a file: ``$TMPDIR/mte-engine-rate-<uid>/<engine
digest>`` holds the earliest time the next creation may start, updated under ``flock``. The
folder is this user's and no one else may write it (checked: in a shared ``/tmp`` another user
could make it first and plant a link where a clock goes, and the clock's write would land in a
file of ours), and a clock is never opened through a link; so the budget is per user. Each caller
takes the next slot (``max(now, next)``), moves ``next`` on by ``1 / rate`` and sleeps until
its slot: creations are spaced evenly, first come first served, with no daemon to run.
(verifiers shares a creation-rate limit between processes in the same spirit.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import struct
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["CreationRate"]

MAX_WAIT_S = 600.0
"""A slot further away than this means the clock file is corrupt (or the rate absurd): the
file is reset instead of sleeping that long."""


def _private_folder(root: Path) -> Path:
    """``root``, made when missing, if it is a directory of this user that no one else may
    write; else ``RuntimeError`` saying so and what to do."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(root)
    except OSError as exc:
        raise RuntimeError(f"the creation-rate folder {root}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise RuntimeError(
            f"{root} is not a private folder of this user (it is a link, another user's, or "
            "writable by others): the engines' creation-rate clocks are not kept there; remove "
            "it, or set TMPDIR to a folder of your own"
        )
    return root


class CreationRate:
    """At most ``rate`` creations per second on the engine named by ``key``, across processes.

    Args:
        key: identifies the engine (its address's endpoint); hashed into the file's name.
        rate: creations per second (> 0).
        folder: where the clock files live (default ``$TMPDIR/mte-engine-rate-<uid>``); a
            folder that is a link, another user's, or writable by others is refused.
    """

    def __init__(self, key: str, rate: float, folder: str | None = None) -> None:
        if not rate > 0:
            raise ValueError(f"a creation rate is a positive number, not {rate!r}")
        self.rate = float(rate)
        default = os.path.join(tempfile.gettempdir(), f"mte-engine-rate-{os.getuid()}")
        root = _private_folder(Path(folder or default))
        self.path = root / hashlib.sha256(key.encode()).hexdigest()[:24]
        self._lock = threading.Lock()  # flock is per open file: threads queue here first

    def _reserve(self) -> float:
        """The time (``time.time``) at which this caller may create."""
        interval = 1.0 / self.rate
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise RuntimeError(
                f"the creation-rate clock {self.path} cannot be opened: {exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = os.pread(fd, 8, 0)
            now = time.time()
            earliest = struct.unpack("<d", data)[0] if len(data) == 8 else now
            if not (now - 3600 < earliest < now + MAX_WAIT_S):
                earliest = now  # a corrupt or stale clock: start afresh
            slot = max(now, earliest)
            os.pwrite(fd, struct.pack("<d", slot + interval), 0)
            return slot
        except OSError as exc:  # not a regular file (only this user could have made it so)
            raise RuntimeError(f"the creation-rate clock {self.path}: {exc}") from exc
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def wait(self) -> float:
        """Block until this caller's slot; returns the seconds waited."""
        with self._lock:
            slot = self._reserve()
        pause = slot - time.time()
        if pause > 0:
            time.sleep(pause)
            return pause
        return 0.0
