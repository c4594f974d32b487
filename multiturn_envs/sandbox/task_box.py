"""The boxes of a shell task (MT/Terminal-v0's): the agent's and the checker's, as provider specs.

Every box of a task is made from the task's image with the substrate's hardening
(:mod:`.hardening`: no network, read-only root, no capabilities unless listed below,
``no-new-privileges``, pids / memory / CPU limits) plus ``RLIMIT_FSIZE``, with the task's
**writable directories** (:class:`~.trees.Layout`) as size-capped tmpfs volumes. Those volumes
are the only places anything in the box can write; their pages count against the box's memory
limit, so no write reaches a disk, and ``RLIMIT_FSIZE`` stops any single file (sparse ones
included) at the same size.

* The agent's box (:func:`agent_spec`): the writable directories (filled with the task's
  starting state by the env), a small volume for the shell's saved state
  (:data:`SHELL_STATE_DIR`), and only the file capabilities (:data:`FILE_CAPS`: chown,
  override file modes; never ``CAP_KILL``), which only root processes hold: a root agent's
  and the box's state keeper (:mod:`.state_keeper`); an agent of another uid has none, and
  ``no-new-privileges`` keeps it so. Its pid 1 is
  :data:`INIT` (root, not dumpable): ``kill -9 -1`` of any user leaves it, so the box survives.
* The checker's box (:func:`checker_spec`, used by :mod:`.checker`): the same writable
  directories (empty until a job brings the agent's), ``/tests``, ``/logs`` and the runner's
  own volume, and the capabilities its runner needs to act as another uid
  (:data:`CHECKER_CAPS`).
"""

from __future__ import annotations

from multiturn_envs.sandbox.provider import BoxSpec, ResourceLimits, TmpfsVolume
from multiturn_envs.sandbox.trees import Layout

__all__ = [
    "CHECKER_CAPS",
    "CHECK_HOME",
    "FILE_CAPS",
    "INIT",
    "KEEPALIVE",
    "LOGS_DIR",
    "RUNNER_DIR",
    "SHELL_STATE_DIR",
    "SHELL_STATE_MB",
    "TESTS_DIR",
    "agent_spec",
    "checker_spec",
]

SHELL_STATE_DIR = "/mte-shell"
"""The shell's saved state: a small volume of its own (never part of the task's state)."""
SHELL_STATE_MB = 8
TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
RUNNER_DIR = "/mte-runner"
CHECK_HOME = "/mte-home"
"""``HOME`` of ``exit-status`` checks: an empty directory of the checker's, so no tool reads
an rc file the agent wrote (``~/.gitconfig``, ``~/.jq``, a user site of Python)."""
FILE_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID")
"""What root may do in a task's container: own and reach every file. Not ``KILL`` (the
keep-alive and the checker's runner run as other uids and stay out of its reach), not
``SETUID``/``SETGID`` (it cannot become them), nothing of the network or the kernel."""
CHECKER_CAPS = (*FILE_CAPS, "SETUID", "SETGID", "SETPCAP", "KILL")
"""The checker's runner: it runs as its own uid and starts each test as the task's verifier
user with :data:`FILE_CAPS` at most (``SETPCAP`` drops the rest from the test's bounding set)."""
INIT = """\
import ctypes, os, signal
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
def reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
signal.signal(signal.SIGCHLD, reap)
while True:
    signal.pause()
"""
"""Pid 1 of every terminal container: root (so the engine gives execs the container's
capabilities), not dumpable (no process can trace it or read its memory), reaping orphans,
with no handler for the signals that end a process: the kernel never delivers them to a
namespace's init from inside, so nothing in the container can stop it."""
KEEPALIVE = ("python3", "-I", "-c", INIT)


def agent_spec(layout: Layout, root: bool, limits: ResourceLimits) -> BoxSpec:
    """An agent's box (module docstring): empty writable directories until the env fills them."""
    from multiturn_envs.sandbox.shell_session import AGENT_UID

    shell = TmpfsVolume(SHELL_STATE_DIR, SHELL_STATE_MB, AGENT_UID if not root else 0)
    return BoxSpec(
        layout.image,
        limits,
        volumes=(*layout.volumes(), shell),
        scratch={} if "/tmp" in layout.paths else None,
        cap_add=FILE_CAPS,  # held by root processes only: the keeper's, a root agent's
        fsize_mb=layout.size_mb,
        keepalive=KEEPALIVE,
    )


def checker_spec(layout: Layout, limits: ResourceLimits) -> BoxSpec:
    """A checker's box (module docstring)."""
    return BoxSpec(
        layout.image,
        limits,
        volumes=(
            *layout.volumes(),
            TmpfsVolume(TESTS_DIR, layout.size_mb),
            TmpfsVolume(LOGS_DIR, 16),
            TmpfsVolume(RUNNER_DIR, 16),
            TmpfsVolume(CHECK_HOME, 16, mode=0o755),
        ),
        scratch={} if "/tmp" in layout.paths else None,
        cap_add=CHECKER_CAPS,
        fsize_mb=layout.size_mb,
        keepalive=KEEPALIVE,
    )
