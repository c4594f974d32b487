"""A persistent bash session inside a container: one long-lived exec, one command per round trip.

Why one exec: an exec costs ~50-80 ms of engine time; a command sent on a live shell's stdin
costs a few milliseconds (docs/envs/terminal.md has the measurements). Why a pipe and not a
pty or tmux: a pipe gives exact exit statuses and no terminal escape codes to clean, and RL
agents send one command per action; full-screen programs are out of scope (they see no tty).

Protocol. The shell is ``bash --noprofile --norc`` with its stderr joined to its stdout, so
the two streams arrive interleaved in the order they were written. Each command travels as
base64 (quotes, heredocs and multi-line text need no escaping) on one line::

    eval "$(printf %s B64 | base64 -d)" </dev/null; __mte_done NONCE $?

``</dev/null`` keeps a stdin reader (``cat``, ``read``, a REPL) from eating the protocol's
next line. ``__mte_done`` saves the shell's state (cwd, variables, functions, aliases) to a
private file and prints ``\\nNONCE RC B64(CWD)\\n``; the output is everything before it.
A fresh random nonce per command means no output can fake the end of another command.

Failure handling, one path for all of them: a command that outlives its timeout, a shell
that exits (``exit``, ``set -e``), is killed, or wedges its own stdout (``exec >/dev/null``)
ends with every process of the agent's uid killed (``kill -9 -1`` from a second exec; the
container's keep-alive runs under another uid and survives) and a new shell that restores the
state saved after the last completed command. The observation says so.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

from multiturn_envs.sandbox.exec_session import pop_frames

AGENT_UID = 65534
STATE_DIR = "/tmp/.mte-shell"
"""Where the shell saves its state after each command by default (the agent's own place). A
caller that must read it from outside (the engine's ``get_archive`` cannot see a tmpfs) passes
a directory on a volume instead."""

_PRELUDE = r"""exec 2>&1
umask 022
mkdir -p {state} 2>/dev/null
__mte_base="$(compgen -v | tr '\n' ' ')"
__mte_save() {{
  {{ local __n
    printf 'cd -- %q 2>/dev/null; unset OLDPWD\n' "$PWD"
    for __n in $(compgen -v); do
      case " $__mte_base " in *" $__n "*) continue;; esac
      case "$__n" in __*|BASH*|FUNCNAME|PIPESTATUS|_) continue;; esac
      declare -p "$__n" 2>/dev/null
    done
    export -p
    declare -f
    alias -p
  }} >{state}/state.tmp 2>/dev/null && mv -f {state}/state.tmp {state}/state 2>/dev/null
}}
__mte_done() {{
  local __rc=$2
  __mte_save
  printf '\n%s %s %s\n' "$1" "$__rc" "$(printf %s "$PWD" | base64 -w0)"
}}
"""


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")


@dataclass(frozen=True)
class CommandResult:
    """What one command produced.

    Attributes:
        output: stdout and stderr interleaved, decoded as UTF-8 (bad bytes replaced), capped.
        exit_code: the command's status; ``None`` when it never finished (timeout, shell died).
        cwd: the shell's working directory afterwards.
        omitted_bytes: bytes of output cut out of the middle by the cap (0: nothing was cut).
        timed_out: the command outlived its timeout and was killed.
        restarted: the shell was replaced (timeout, ``exit``, killed, wedged): state saved after
            the last completed command was restored, running background jobs are gone.
        seconds: wall time of the round trip.
    """

    output: str
    exit_code: int | None
    cwd: str
    omitted_bytes: int = 0
    timed_out: bool = False
    restarted: bool = False
    seconds: float = 0.0


class ExecStream:
    """One attached exec (stdin open, stdout+stderr multiplexed) with a deadline-bound reader."""

    def __init__(
        self,
        api: Any,
        container_id: str,
        command: list[str],
        *,
        user: str,
        workdir: str,
        environment: dict[str, str] | None = None,
    ) -> None:
        self.api = api
        self.exec_id: str = api.exec_create(
            container_id,
            command,
            stdin=True,
            user=user,
            workdir=workdir,
            environment=environment,
        )["Id"]
        self.sock = api.exec_start(self.exec_id, socket=True)
        self.raw: socket.socket = getattr(self.sock, "_sock", self.sock)
        self._frames = bytearray()
        self.closed = False

    def send(self, data: bytes) -> None:
        self.raw.settimeout(30)
        self.raw.sendall(data)

    def read(self, deadline: float) -> bytes | None:
        """The next payload bytes (both streams), ``b""`` at end of stream, ``None`` at the
        deadline."""
        while True:
            chunks = [chunk for _kind, chunk in pop_frames(self._frames)]
            if chunks:
                return b"".join(chunks)
            if self.closed:
                return b""
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.raw.settimeout(left)
            try:
                data = self.raw.recv(1 << 16)
            except TimeoutError:
                return None
            except OSError:
                data = b""
            if not data:
                self.closed = True
                continue
            self._frames.extend(data)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self.raw.shutdown(socket.SHUT_WR)
        with contextlib.suppress(Exception):
            self.sock.close()


class _CappedOutput:
    """Keeps the head and the tail of a stream, counting what was cut from the middle."""

    def __init__(self, cap: int, keep: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.keep = keep  # extra tail bytes kept so a terminator split across reads is found
        self.head = bytearray()
        self.tail = bytearray()
        self.omitted = 0

    def add(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head.extend(data[:room])
            data = data[room:]
        self.tail.extend(data)
        excess = len(self.tail) - (self.tail_cap + self.keep)
        if excess > 0:
            del self.tail[:excess]
            self.omitted += excess

    def parts(self, tail_end: int | None = None) -> tuple[bytes, bytes, int]:
        """(head, tail, omitted) of the stream up to ``tail_end`` in the tail, the tail cut to
        its cap (the extra bytes kept to find a terminator are not shown)."""
        tail = bytes(self.tail if tail_end is None else self.tail[:tail_end])
        omitted = self.omitted
        if omitted and len(tail) > self.tail_cap:
            omitted += len(tail) - self.tail_cap
            tail = tail[-self.tail_cap :]
        return bytes(self.head), tail, omitted


def cap_marker(omitted: int) -> str:
    """The line that stands where output was cut."""
    return f"\n[... output truncated: {omitted} bytes omitted ...]\n"


class ShellSession:
    """A persistent bash in ``container`` as the agent's uid (see the module docstring).

    Args:
        api: the engine's low-level client (``docker.APIClient``).
        container_id: the container (kept alive by another uid).
        workdir: the shell's first working directory.
        environment: the shell's initial environment (added to the image's).
        output_cap: bytes of output kept per command (head and tail halves).
        state_dir: where the shell saves its state after each command (the agent's uid must be
            able to write there).
    """

    def __init__(
        self,
        api: Any,
        container_id: str,
        *,
        workdir: str = "/app",
        environment: dict[str, str] | None = None,
        output_cap: int = 10_000,
        state_dir: str = STATE_DIR,
    ) -> None:
        self.api = api
        self.state_dir = state_dir
        self.container_id = container_id
        self.workdir = workdir
        self.environment = dict(environment or {})
        self.output_cap = int(output_cap)
        self.cwd = workdir
        self.pid: int | None = None
        self.restarts = 0
        self._stream: ExecStream | None = None
        self._start(restore=False)

    # ------------------------------------------------------------------ lifecycle
    def _start(self, restore: bool) -> None:
        stream = ExecStream(
            self.api,
            self.container_id,
            ["bash", "--noprofile", "--norc"],
            user=f"{AGENT_UID}:{AGENT_UID}",
            workdir=self.workdir,
            environment=self.environment,
        )
        self._stream = stream
        nonce = secrets.token_hex(8)
        script = _PRELUDE.format(state=self.state_dir)
        if restore:
            script += f". {self.state_dir}/state >/dev/null 2>&1\n"
        script += f"__mte_save; printf '%s %s\\n' {nonce} $$\n"
        stream.send(script.encode())
        text = bytearray()
        deadline = time.monotonic() + 30
        while b"\n" not in text.partition(nonce.encode())[2]:
            data = stream.read(deadline)
            if not data:
                raise RuntimeError(f"the shell did not start: {bytes(text[-300:])!r}")
            text.extend(data)
        self.pid = int(text.partition(nonce.encode())[2].split()[0])
        if restore:  # where the restored state left the shell
            probe = self._roundtrip("pwd", 10.0)
            if probe is not None and probe.exit_code == 0:
                self.cwd = probe.output.strip() or self.workdir

    def kill_agent_processes(self) -> None:
        """``kill -9 -1`` as the agent's uid: every process of the agent, the shell included.

        Three passes in one process (``kill`` is a shell builtin): a fork bomb forks while the
        first pass walks the process table."""
        exec_id = self.api.exec_create(
            self.container_id,
            ["sh", "-c", "kill -9 -1; kill -9 -1; kill -9 -1; true"],
            user=f"{AGENT_UID}:{AGENT_UID}",
        )["Id"]
        self.api.exec_start(exec_id)

    def restart(self) -> None:
        """Kill everything of the agent and start a shell with the last saved state.

        Raises ``RuntimeError`` when no shell can be started (the engine refuses the exec, e.g.
        while a fork bomb holds every pid): the caller moves to a fresh container."""
        if self._stream is not None:
            self._stream.close()
        with contextlib.suppress(Exception):
            self.kill_agent_processes()
        self.restarts += 1
        last: Exception | None = None
        for _attempt in range(3):
            try:
                self._start(restore=True)
                return
            except Exception as exc:  # the engine refused the exec, or the shell died at once
                last = exc
                with contextlib.suppress(Exception):
                    self.kill_agent_processes()
        raise RuntimeError(f"the shell could not be restarted: {last}")

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    # ------------------------------------------------------------------ commands
    def run(self, command: str, timeout_s: float = 30.0) -> CommandResult:
        """Run ``command`` (any bash text) and return its output, status and working directory.

        Never raises for anything the command does; raises ``RuntimeError`` only when the
        engine itself fails (the shell cannot be restarted).
        """
        start = time.monotonic()
        result = self._roundtrip(command, timeout_s)
        if result is not None and result.exit_code is not None:
            return CommandResult(
                result.output,
                result.exit_code,
                result.cwd,
                result.omitted_bytes,
                seconds=time.monotonic() - start,
            )
        # timed out (result carries the output so far) or the shell ended (result is None
        # when nothing at all came back)
        timed_out = result is not None and result.timed_out
        partial = result.output if result is not None else ""
        omitted = result.omitted_bytes if result is not None else 0
        self.restart()
        if timed_out:
            note = (
                f"[the command did not finish within {timeout_s:g} s and was killed, with every "
                "process it started; the shell was restarted]"
            )
        else:
            note = "[the shell exited or stopped answering; a new shell was started]"
        note += f" [state restored: cwd {self.cwd}]"
        output = f"{partial}\n{note}" if partial else note
        return CommandResult(
            output,
            None,
            self.cwd,
            omitted,
            timed_out=timed_out,
            restarted=True,
            seconds=time.monotonic() - start,
        )

    def _roundtrip(self, command: str, timeout_s: float) -> CommandResult | None:
        stream = self._stream
        if stream is None:
            raise RuntimeError("the shell session is closed")
        nonce = "__MTE_" + secrets.token_hex(8)
        line = (
            f'eval "$(printf %s {_b64(command)} | base64 -d)" </dev/null; __mte_done {nonce} $?\n'
        )
        try:
            stream.send(line.encode())
        except OSError:
            return None
        tag = ("\n" + nonce + " ").encode()
        out = _CappedOutput(self.output_cap, keep=len(tag) + 8192)
        deadline = time.monotonic() + timeout_s
        while True:
            data = stream.read(deadline)
            if data is None:
                return self._partial(out, timed_out=True)
            if not data:
                return self._partial(out, timed_out=False) if (out.head or out.tail) else None
            out.add(data)
            where = out.tail.find(tag)
            head_where = -1
            if where < 0 and not out.omitted:  # short output: the tag may straddle head/tail
                joined = out.head + out.tail
                head_where = joined.find(tag)
            if where < 0 and head_where < 0:
                continue
            if head_where >= 0:
                before, rest = bytes(joined[:head_where]), bytes(joined[head_where + len(tag) :])
                head_bytes, tail_bytes = before, b""
            else:
                rest = bytes(out.tail[where + len(tag) :])
            if b"\n" not in rest:
                continue  # the status line is not complete yet
            omitted = 0
            if head_where < 0:
                head_bytes, tail_bytes, omitted = out.parts(where)
            status = rest.split(b"\n", 1)[0].split()
            rc = int(status[0])
            cwd = base64.b64decode(status[1]).decode("utf-8", "replace") if len(status) > 1 else ""
            self.cwd = cwd or self.cwd
            return CommandResult(self._text(head_bytes, tail_bytes, omitted), rc, self.cwd, omitted)

    def _partial(self, out: _CappedOutput, timed_out: bool) -> CommandResult:
        head, tail, omitted = out.parts()
        return CommandResult(
            self._text(head, tail, omitted), None, self.cwd, omitted, timed_out=timed_out
        )

    @staticmethod
    def _text(head: bytes, tail: bytes, omitted: int) -> str:
        if omitted:
            return (
                head.decode("utf-8", "replace")
                + cap_marker(omitted)
                + tail.decode("utf-8", "replace")
            )
        return (head + tail).decode("utf-8", "replace")

    # ------------------------------------------------------------------ state
    def saved_state(self) -> str:
        """The shell's state after the last command, as bash text that recreates it."""
        result = self._roundtrip(f"cat {self.state_dir}/state", 10.0)
        if result is None or result.exit_code != 0:
            raise RuntimeError("could not read the shell's saved state")
        return result.output

    def load_state(self, state: str) -> None:
        """Recreate a state from :meth:`saved_state` in this shell (cwd, variables, functions)."""
        result = self._roundtrip(state, 10.0)
        if result is None:
            raise RuntimeError("the shell died while loading a saved state")
        self._roundtrip("true", 10.0)  # saves the loaded state as this shell's own
