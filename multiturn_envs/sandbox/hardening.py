"""The hardening of every sandbox container, in one place: what a box may do, who runs in it.

Every box a Docker engine makes (:meth:`~multiturn_envs.sandbox.docker_engine.DockerEngine.create`,
from a :class:`~multiturn_envs.sandbox.provider.BoxSpec`) has:

* no network (``network_mode=none``: only ``lo``) -- capability ``no-network``;
* a read-only root; the writable places are the spec's size-capped tmpfs (``/tmp`` by default,
  ``noexec``-free) and tmpfs volumes -- ``read-only-root``, ``tmpfs-volumes``;
* all Linux capabilities dropped but the spec's ``cap_add``, and ``no-new-privileges`` --
  ``dropped-privileges``;
* pids, memory (no swap) and CPU limits, a ``nofile`` ulimit, an optional ``RLIMIT_FSIZE`` --
  ``pids-limit``, ``memory-limit``, ``cpu-limit``;
* an init (``--init``: orphans are reaped, never zombies) and two uids: the keep-alive
  (``sleep infinity``) runs as :data:`KEEPALIVE_UID`, the runner and the code as
  :data:`CODE_UID`, so ``kill -9 -1`` by the code can never stop the box -- ``separate-uids``
  (a box whose execs need capabilities runs a root pid 1 of the spec's instead, which no
  process of the box can signal);
* labels naming the owner process and the engine (:mod:`.orphans`).

The code runner (:mod:`multiturn_envs.sandbox.judge`) arrives by ``put_archive`` into the box's
anonymous ``/job`` volume and is byte-compiled there by root (a ``.pyc`` the code cannot
rewrite): :func:`install_runner`.
"""

from __future__ import annotations

import io
import tarfile
import time

from multiturn_envs.sandbox.jobs import RUNNER_PATH
from multiturn_envs.sandbox.provider import Box, ResourceLimits

__all__ = [
    "CODE_UID",
    "COMPILE_RUNNER",
    "KEEPALIVE_UID",
    "SCRATCH",
    "WIPE",
    "ContainerLimits",
    "install_runner",
]

KEEPALIVE_UID = 65533
CODE_UID = 65534
SCRATCH = "/tmp/scratch"
WIPE = ("/tmp", "/dev/shm")
"""Where the code can write: emptied after every job."""
COMPILE_RUNNER = (
    "import py_compile; py_compile.compile('/job/runner.py', cfile='/job/runner.pyc', doraise=True)"
)
ContainerLimits = ResourceLimits
"""A container's resource limits (the provider protocol's :class:`ResourceLimits`)."""


def _runner_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = RUNNER_PATH.read_bytes()
        info = tarfile.TarInfo("runner.py")
        info.size, info.mode, info.uid, info.gid = len(data), 0o644, 0, 0
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def install_runner(box: Box) -> None:
    """Put the code runner into the box's ``/job`` volume and byte-compile it as root."""
    box.put_archive("/job", _runner_archive())
    result = box.exec(["python3", "-I", "-c", COMPILE_RUNNER], user="0:0", timeout_s=60)
    if result.exit_code != 0:
        raise RuntimeError(f"compiling the runner failed: {result.output[-500:]!r}")
