"""The hardening of every sandbox container, in one place: what a container may do, who runs in it.

No network (``network_mode=none``), read-only root, all capabilities dropped,
``no-new-privileges``, an init process (``--init``: orphans are reaped, never zombies), pids /
memory (no swap) / CPU limits, ``nofile`` ulimit, a size-capped ``noexec``-free tmpfs at ``/tmp``
as the only writable scratch, and two uids: the keep-alive runs as :data:`KEEPALIVE_UID`, the
runner and the code as :data:`CODE_UID`, so ``kill -9 -1`` by the code can never stop the
container. The runner (:mod:`multiturn_envs.sandbox.judge`) arrives by ``put_archive`` into the
container's anonymous ``/job`` volume and is byte-compiled there by root (a ``.pyc`` the code
cannot rewrite). The docker pool (:mod:`.docker_pool`) and MT/Terminal-v0 (through the pool's
``hardened_container``) make their containers here.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from multiturn_envs.sandbox.jobs import RUNNER_PATH
from multiturn_envs.sandbox.orphans import LABEL, OWNER_LABEL

__all__ = [
    "CODE_UID",
    "COMPILE_RUNNER",
    "KEEPALIVE_UID",
    "SCRATCH",
    "WIPE",
    "ContainerLimits",
    "hardened_container",
]

KEEPALIVE_UID = 65533
CODE_UID = 65534
SCRATCH = "/tmp/scratch"
WIPE = ("/tmp", "/dev/shm")
"""Where the code can write: emptied after every job."""
COMPILE_RUNNER = (
    "import py_compile; py_compile.compile('/job/runner.py', cfile='/job/runner.pyc', doraise=True)"
)


@dataclass(frozen=True)
class ContainerLimits:
    """A container's resource limits: memory (swap included), CPU quota, processes, ``/tmp``."""

    memory_mb: int = 512
    cpus: float = 1.0
    pids_limit: int = 64
    tmpfs_mb: int = 64


def _runner_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = RUNNER_PATH.read_bytes()
        info = tarfile.TarInfo("runner.py")
        info.size, info.mode, info.uid, info.gid = len(data), 0o644, 0, 0
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def hardened_container(
    client: Any,
    image: str,
    limits: ContainerLimits,
    owner: str,
    mounts: Sequence[Any] = (),
    *,
    runner: bool = True,
    tmpfs: dict[str, str] | None = None,
    cap_add: Sequence[str] = (),
    fsize_mb: int | None = None,
    keepalive: Sequence[str] | None = None,
) -> Any:
    """A new hardened container of ``image`` (module docstring), labelled as ``owner``'s
    (:func:`~multiturn_envs.sandbox.orphans.owner_tag`); the caller removes it.

    Args:
        mounts: extra ``docker.types.Mount``s (MT/Terminal-v0's size-capped tmpfs volumes).
        runner: put the runner in an anonymous ``/job`` volume and byte-compile it (the
            pool's containers); ``False``: no ``/job`` volume at all.
        tmpfs: ``--tmpfs`` mounts (default: the pool's ``/tmp``; ``{}``: none, when a mount
            provides ``/tmp``).
        cap_add: capabilities kept (all others are dropped; default none).
        fsize_mb: ``RLIMIT_FSIZE`` of every process (no file, sparse or not, can grow past
            it).
        keepalive: a command that runs as root and as pid 1 instead of ``--init`` with
            ``sleep infinity`` as uid 65533. The engine gives an exec the container's
            capabilities only when the container's user is root: a container whose execs
            need ``cap_add`` runs such a keep-alive (pid 1 of its namespace: no process of
            the container can kill it; it must reap orphans and not be dumpable).
    """
    from docker.types import Mount, Ulimit

    ulimits = [Ulimit(name="nofile", soft=256, hard=256)]
    if fsize_mb is not None:
        size = int(fsize_mb) << 20
        ulimits.append(Ulimit(name="fsize", soft=size, hard=size))
    all_mounts = [Mount("/job", None, type="volume")] if runner else []
    container = client.containers.run(
        image,
        list(keepalive) if keepalive else ["sleep", "infinity"],
        detach=True,
        init=not keepalive,
        user="0:0" if keepalive else f"{KEEPALIVE_UID}:{KEEPALIVE_UID}",
        network_mode="none",
        read_only=True,
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"}
        if tmpfs is None
        else tmpfs,
        mounts=[*all_mounts, *mounts],
        cap_drop=["ALL"],
        cap_add=list(cap_add) or None,
        security_opt=["no-new-privileges"],
        pids_limit=limits.pids_limit,
        mem_limit=f"{limits.memory_mb}m",
        memswap_limit=f"{limits.memory_mb}m",
        nano_cpus=int(limits.cpus * 1e9),
        ulimits=ulimits,
        labels={LABEL: "1", OWNER_LABEL: owner},
        environment={"LANG": "C.UTF-8"},
        working_dir="/",
    )
    if not runner:
        return container
    try:
        if not container.put_archive("/job", _runner_archive()):
            raise RuntimeError("put_archive of the runner failed")
        code, output = container.exec_run(["python3", "-I", "-c", COMPILE_RUNNER], user="0:0")
        if code != 0:
            raise RuntimeError(f"compiling the runner failed: {output[-500:]!r}")
    except Exception:
        with contextlib.suppress(Exception):
            container.remove(force=True, v=True)
        raise
    return container
