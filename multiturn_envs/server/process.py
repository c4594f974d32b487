"""A server in a child process on loopback that stops itself: for tests, benchmarks, notebooks.

``with ServerProcess("MT/FrozenLake-v0") as url:`` starts ``python -m multiturn_envs.cli serve`` on
127.0.0.1 with a free port, waits until it prints its address, and on exit sends SIGTERM (the
server closes every session's env), then SIGKILL if it has not stopped within ``stop_timeout_s``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from multiturn_envs.server.serve import READY_PREFIX, TOKEN_ENV


class ServerProcess:
    """One ``multiturn-envs serve`` child process bound to 127.0.0.1.

    Args:
        env_id: the env to serve.
        env_kwargs: ``gym.make`` keyword arguments (sent as ``--env-arg k=<json>``).
        token: a bearer token to require (passed through the environment, not argv).
        args: more ``serve`` flags, e.g. ``["--max-sessions", "4", "--idle-timeout", "1"]``.
        start_timeout_s: how long to wait for the address line.
        stop_timeout_s: how long SIGTERM may take before SIGKILL.
        python: the interpreter (default: this one).
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        *,
        token: str | None = None,
        args: Sequence[str] = (),
        start_timeout_s: float = 60.0,
        stop_timeout_s: float = 15.0,
        python: str | None = None,
    ) -> None:
        import json

        self.argv = [python or sys.executable, "-m", "multiturn_envs.cli", "serve", env_id]
        self.argv += ["--host", "127.0.0.1", "--port", "0", *args]
        for key, value in (env_kwargs or {}).items():
            self.argv += ["--env-arg", f"{key}={json.dumps(value)}"]
        self.token = token
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=200)

    def start(self) -> str:
        env = dict(os.environ)
        env.pop(TOKEN_ENV, None)
        if self.token is not None:
            env[TOKEN_ENV] = self.token
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        found = threading.Event()

        def pump() -> None:  # keeps the pipe drained for the server's lifetime
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip("\n"))
                if line.startswith(READY_PREFIX) and not found.is_set():
                    self.url = line[len(READY_PREFIX) :].strip()
                    found.set()

        threading.Thread(target=pump, daemon=True, name="mte-server-output").start()
        deadline = time.monotonic() + self.start_timeout_s
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.output)
                raise RuntimeError(f"the env server did not start ({self.argv}):\n{tail}")
        return self.url

    def stop(self) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL); its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return proc.returncode

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
