"""An engine reached over SSH: the engine's unix socket forwarded to a local one by ``ssh -L``.

Why a forwarded socket and not the Docker SDK's own ``ssh://`` support: the SDK's paramiko
transport needs a package the project does not depend on, and its shell-out transport runs
``docker system dial-stdio`` on the far side (the Docker CLI there) through a pipe whose socket
object has neither timeouts nor ``shutdown``, which the runner's and the shell's long-lived
streams rely on (a bounded read, a close that reaches the engine at once). ``ssh -N -L
LOCAL.sock:REMOTE.sock`` gives the client an ordinary unix socket: every call and stream
behaves as on this machine's engine, and only ``ssh`` (OpenSSH's client) is needed here and
``sshd`` with stream-local forwarding (on by default) there.

The tunnel is a child process of ours: ``BatchMode`` (never a password prompt), a connect
timeout, keep-alives so a dead link ends it, ``ExitOnForwardFailure`` so a socket that cannot
be forwarded fails the start instead of every later call. Its local socket lives in a private
temporary folder (mode 0700) removed on close.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiturn_envs.sandbox.engines import EngineAddress

__all__ = ["SshTunnel"]

START_TIMEOUT_S = 20.0


def ssh_destination(url: str) -> tuple[str, str]:
    """``([USER@]HOST, PORT or "")`` of an ``ssh://`` engine URL (parsed and checked by
    :class:`~.engines.EngineAddress`); an IPv6 host loses its brackets, which ssh does not
    read in a destination."""
    match = re.match(r"^ssh://(?:([^@/]+)@)?(\[[^\]/]+\]|[^:/]+)(?::(\d+))?$", url)
    if match is None:
        raise ValueError(f"not an ssh:// engine URL: {url!r}")
    user, host, port = match.groups()
    host = host.strip("[]")
    return (f"{user}@{host}" if user else host), port or ""


class SshTunnel:
    """``ssh -N -L`` from a private local socket to ``address.ssh_socket`` on the SSH host."""

    def __init__(self, address: EngineAddress, start_timeout_s: float = START_TIMEOUT_S) -> None:
        if shutil.which("ssh") is None:
            raise RuntimeError(
                f"the engine {address.label} is reached over SSH, and no ssh client is installed"
            )
        self.address = address
        self._folder = tempfile.mkdtemp(prefix="mte-ssh-")
        os.chmod(self._folder, 0o700)
        self.local_socket = os.path.join(self._folder, "docker.sock")
        command = [
            "ssh",
            "-N",
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            f"ConnectTimeout={int(start_timeout_s)}",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            "-o",
            "StreamLocalBindUnlink=yes",
        ]
        for option in address.ssh_options:
            command += ["-o", option]
        if address.ssh_identity:
            command += ["-i", address.ssh_identity, "-o", "IdentitiesOnly=yes"]
        destination, port = ssh_destination(address.url)
        if port:
            command += ["-p", port]
        command += ["-L", f"{self.local_socket}:{address.ssh_socket}", destination]
        # its messages go to a file: a pipe nobody drains would stop ssh (and every engine call
        # through it) once a long-lived link had written 64 KiB of them
        self._log = os.path.join(self._folder, "ssh.log")
        with open(self._log, "wb") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # a Ctrl-C meant for us does not cut the link first
            )
        deadline = time.monotonic() + start_timeout_s
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                why = self._stderr_tail()
                self.close()
                raise RuntimeError(
                    f"ssh to {address.label} did not forward the engine's socket "
                    f"{address.ssh_socket}: {why or 'no answer within the time limit'}"
                )
            time.sleep(0.05)

    def _answers(self) -> bool:
        if not os.path.exists(self.local_socket):
            return False
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(2)
        try:
            probe.connect(self.local_socket)
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def _stderr_tail(self) -> str:
        """The last line ssh wrote (of its last 4 KiB), once it has ended."""
        if self._process.poll() is not None:
            with contextlib.suppress(OSError), open(self._log, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
                text = log.read(4096).decode("utf-8", "replace").strip()
                return text.splitlines()[-1] if text else ""
        return ""

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        """End the ``ssh`` process and remove the local socket; idempotent."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        shutil.rmtree(self._folder, ignore_errors=True)
