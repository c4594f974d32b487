"""LocalSandbox: the runner in a local subprocess, for machines without a Docker engine.

NOT A SECURITY BOUNDARY. It bounds accidents (infinite loops, memory hogs, fork bombs, output
floods, stray background processes), not an adversary: the program runs on the host kernel,
can read whatever the code's uid can read, and, without bubblewrap, can use the network. Use the
docker backend for untrusted code.

What it does:

* the same runner as the containers (:mod:`multiturn_envs.sandbox.judge`): all tests, per-test
  wall and CPU limits, ``RLIMIT_AS`` memory limit, judge-style comparison, every stray process
  killed after each test (the runner is a child subreaper);
* run as root, the code drops to uid 65534 (``nobody``), so it cannot read the job file, kill
  the runner, or write outside its scratch directory and world-writable places, and
  ``RLIMIT_NPROC`` caps its processes;
* with ``bwrap`` (bubblewrap) installed, the runner runs with no network, a private ``/tmp``, a
  read-only view of ``/`` and its own pid namespace (everything dies with the runner);
* the program sees a fixed, minimal environment, never the host's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence

from multiturn_envs.sandbox.base import RunLimits, RunResult, Sandbox, TestCase
from multiturn_envs.sandbox.jobs import (
    RUNNER_PATH,
    RUNNER_STDERR_CAP,
    guard_seconds,
    job_bytes,
    parse_report,
    report_bytes,
)

logger = logging.getLogger(__name__)

NOT_A_BOUNDARY = (
    "LocalSandbox runs submitted code on this host: it is NOT a security boundary "
    "(resource limits only{bwrap}). Use the docker backend "
    "(multiturn-envs sandbox build) for untrusted code."
)
NOBODY = 65534


class LocalSandbox(Sandbox):
    """Runs programs in local subprocesses under resource limits (and bubblewrap if present).

    Args:
        python: the interpreter that runs the runner and the programs (absolute path; default:
            this process's interpreter).
        bwrap: use bubblewrap: ``None`` = when installed, ``True`` = required, ``False`` = never.
        code_uid: the uid the code runs as when this process is root (default 65534); ignored
            when not root (the code then runs as the caller).
        nproc: ``RLIMIT_NPROC`` of the code when it runs under ``code_uid`` (counts every
            process of that uid on the host).
        quiet: do not warn that this is not a security boundary (it is still logged).
    """

    name = "local"

    def __init__(
        self,
        python: str | None = None,
        bwrap: bool | None = None,
        code_uid: int | None = NOBODY,
        nproc: int = 64,
        quiet: bool = False,
    ) -> None:
        self.python = os.path.abspath(python or _default_python())
        found = shutil.which("bwrap")
        if bwrap and not found:
            raise RuntimeError(
                "bwrap was required but is not installed (apt-get install bubblewrap)"
            )
        self.bwrap = found if (bwrap is None or bwrap) and found else None
        self.code_uid = code_uid if os.geteuid() == 0 else None
        self.nproc = nproc
        message = NOT_A_BOUNDARY.format(bwrap=", under bubblewrap" if self.bwrap else "")
        logger.warning(message)
        if not quiet:
            warnings.warn(message, stacklevel=2)

    def _command(self, job_dir: str, job_path: str) -> list[str]:
        runner = [self.python, "-I", str(RUNNER_PATH), job_path]
        if not self.bwrap:
            return runner
        binds: list[str] = []
        for path in {str(RUNNER_PATH.parent), os.path.dirname(self.python)}:
            binds += ["--ro-bind", path, path]
        return [
            self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            *binds,
            "--bind",
            job_dir,
            job_dir,
            "--chdir",
            job_dir,
            *runner,
        ]

    def run(
        self, program: str, tests: Sequence[TestCase], limits: RunLimits | None = None
    ) -> RunResult:
        limits = limits or RunLimits()
        job_dir = tempfile.mkdtemp(prefix="mte-local-")
        try:
            os.chmod(job_dir, 0o755)  # the code's uid must reach program.py, never job.jsonl
            program_path = os.path.join(job_dir, "program.py")
            with open(program_path, "w", encoding="utf-8") as f:
                f.write(program)
            os.chmod(program_path, 0o644)
            job_path = os.path.join(job_dir, "job.jsonl")
            fd = os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.writelines(
                    job_bytes(
                        program_path,
                        os.path.join(job_dir, "scratch"),
                        tests,
                        limits,
                        uid=self.code_uid,
                        nproc=self.nproc if self.code_uid is not None else None,
                    )
                )
            return self._execute(job_dir, job_path, tests, limits)
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)

    def _execute(
        self, job_dir: str, job_path: str, tests: Sequence[TestCase], limits: RunLimits
    ) -> RunResult:
        proc = subprocess.Popen(
            self._command(job_dir, job_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd=job_dir,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        try:
            out, err, died = _read_runner(
                proc,
                guard_seconds(limits, len(tests)),
                report_bytes(limits, len(tests)),
                RUNNER_STDERR_CAP,
            )
        finally:
            _kill_group(proc.pid)
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        if died is None and proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            died = f"the runner exited with status {proc.returncode} {tail[0]}".strip()
        return parse_report(out.decode("utf-8", "replace"), tests, self.name, died)


def _read_runner(
    proc: subprocess.Popen[bytes], guard_s: float, out_cap: int, err_cap: int
) -> tuple[bytes, bytes, str | None]:
    """(stdout, stderr, why the runner was stopped or ``None``): the runner's two pipes read
    until both close, within ``guard_s`` and the caps (``communicate`` would buffer whatever a
    broken runner writes). Past a bound the runner's process group is killed."""
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    caps = {proc.stdout.fileno(): out_cap, proc.stderr.fileno(): err_cap}
    deadline = time.monotonic() + guard_s
    died: str | None = None
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                died = "the runner exceeded its overall time guard and was killed"
                break
            for key, _ in selector.select(min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buf = streams[key.fd]
                buf.extend(chunk)
                if len(buf) > caps[key.fd]:
                    del buf[caps[key.fd] :]
                    which = "report" if key.fd == proc.stdout.fileno() else "stderr"
                    died = f"the runner's {which} passed its bound of {caps[key.fd]:,} bytes"
                    break
            if died is not None:
                break
    if died is not None:
        _kill_group(proc.pid)
    return bytes(streams[proc.stdout.fileno()]), bytes(streams[proc.stderr.fileno()]), died


def _default_python() -> str:
    """The system interpreter when there is one: a venv's or pyenv's base often lives under a
    home directory the code's uid cannot read, and shims cost ~80 ms per start."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
