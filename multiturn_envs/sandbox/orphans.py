"""Orphan reaping: containers whose owner process is gone are removed, by id.

Every container we start carries the owner's host, pid and process start time as labels
(:data:`OWNER_LABEL`, so a reused pid is not mistaken for the owner). At a pool's start-up (and
from ``multiturn-envs sandbox reap``) the labelled containers whose owner is
gone are removed. Nothing unlabelled is ever touched, nor another machine's container on a
shared engine.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

__all__ = ["LABEL", "OWNER_LABEL", "owner_tag", "reap_orphans"]

LABEL = "multiturn-envs.sandbox"
OWNER_LABEL = "multiturn-envs.owner"


def _process_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_tag(pid: int | None = None) -> str:
    """``host:pid:start-time`` of a process: unique even when pids are reused."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_process_start(pid)}"


def _owner_alive(tag: str) -> bool:
    host, _, rest = tag.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True  # another machine's container on a shared engine: never ours to judge
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    return _process_start(pid) == start


def reap_orphans(client: Any) -> list[str]:
    """Remove our labelled containers whose owning process is gone; returns their ids."""
    removed = []
    # ignore_removed: docker-py inspects each listed container; one removed in between (by a
    # pool's background removal, another process's reaper) would raise NotFound mid-list
    listed = client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
    for container in listed:
        tag = container.labels.get(OWNER_LABEL, "")
        if _owner_alive(tag):
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True, v=True)
            removed.append(container.id)
    return removed
