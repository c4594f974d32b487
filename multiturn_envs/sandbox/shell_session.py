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
file and prints ``\\nNONCE RC B64(CWD)\\n``; the output is everything before it. A fresh
random nonce per command means no output can fake the end of another command; the marker is
looked for in the stream as it arrives (before any output is cut), so a flood of output
(``yes``, also in the background) cannot hide it. Output that arrives after the marker
(a background job's) opens the next command's output.

Failure handling, one path for all of them: a command that outlives its timeout, a shell
that exits (``exit``, ``set -e``), is killed, or wedges its own stdout (``exec >/dev/null``)
ends with every process of the agent's uid killed (``kill -9 -1`` from a second exec until a
count over ``/proc`` finds none left: :data:`KILL_SCRIPT`; the container's keep-alive runs
under another uid and survives) and a new shell that loads the
state saved after the last completed command. That file is the agent's to write: the host
reads it through the engine (bounded, no process in the container), and a saved state that
stops or hangs the new shell is dropped for a clean shell, never an exception. The
observation says which.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from multiturn_envs.sandbox.archive_stream import read_small_file
from multiturn_envs.sandbox.provider import Box, EngineGone, ProcessStream

AGENT_UID = 65534
STATE_DIR = "/tmp/.mte-shell"
"""Where the shell saves its state after each command by default. A caller that must read it
from outside (the engine's ``get_archive`` cannot see a ``--tmpfs`` mount) passes a directory
on a volume instead."""
STATE_CAP = 4 << 20
"""The largest saved state loaded back (bytes); a bigger one is dropped (a clean shell)."""
LOAD_TIMEOUT_S = 10.0
"""How long loading a saved state may take before it is dropped."""
STATUS_CAP = 1 << 16
"""The longest status line accepted after a marker (the cwd is base64 in it)."""

_PRELUDE = r"""exec 2>&1
umask 022
mkdir -p {state} 2>/dev/null
__mte_base="$(compgen -v | tr '\n' ' ')"
__mte_save() {{
  {{ local __n __f
    printf 'cd -- %q 2>/dev/null; unset OLDPWD\n' "$PWD"
    for __n in $(compgen -v); do
      case " $__mte_base " in *" $__n "*) continue;; esac
      case "$__n" in __*|BASH*|FUNCNAME|PIPESTATUS|_) continue;; esac
      declare -p "$__n" 2>/dev/null
    done
    export -p
    for __f in $(compgen -A function); do
      case "$__f" in __mte_*) continue;; esac
      declare -f -- "$__f"
    done
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
        state_lost: the saved state could not be loaded into the new shell (it stopped or
            hung it): the new shell is a clean one in the first working directory.
    """

    output: str
    exit_code: int | None
    cwd: str
    omitted_bytes: int = 0
    timed_out: bool = False
    restarted: bool = False
    seconds: float = 0.0
    state_lost: bool = False


class _CappedOutput:
    """Keeps the head and the tail of a stream, counting what was cut from the middle."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.omitted = 0

    def add(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head.extend(data[:room])
            data = data[room:]
        self.tail.extend(data)
        excess = len(self.tail) - self.tail_cap
        if excess > 0:
            del self.tail[:excess]
            self.omitted += excess

    def empty(self) -> bool:
        return not self.head and not self.tail and not self.omitted


def cap_marker(omitted: int) -> str:
    """The line that stands where output was cut."""
    return f"\n[... output truncated: {omitted} bytes omitted ...]\n"


KILL_SCRIPT = r"""
n=0
while :; do
  while kill -9 -1 2>/dev/null; do n=$((n+1)); [ "$n" -ge 100000 ] && break; done
  left=0
  for d in /proc/[0-9]*; do
    case "${d#/proc/}" in 1|"$$") continue;; esac
    state=; uid=
    while read -r key a b _; do
      case "$key" in State:) state=$a;; Uid:) uid=$b; break;; esac
    done < "$d/status" 2>/dev/null
    [ "$uid" = "$EUID" ] || continue
    [ "$state" = Z ] && continue
    left=$((left+1))
  done
  [ "$left" -eq 0 ] && exit 0
  [ "$SECONDS" -ge "$1" ] && { echo "$left process(es) of the agent survive"; exit 1; }
done
"""
"""Kill every process of the caller's uid and return only once none is left (zombies aside,
which the box's init reaps; pid 1 aside, the box's init, which a root agent shares a uid with
and no signal from inside ends), or fail after ``$1`` seconds. ``kill -9 -1`` pass after pass
until a pass finds nothing, then a count over ``/proc`` (the effective uid of each process,
from its ``status``): a fork bomb's child forked while a pass walked the process table is
found by the count, and the passes start again. Builtins only (``kill``, ``read``, globs, no
command substitution), so once started the killer needs no free pid."""
KILL_BOUND_S = 5


class ShellSession:
    """A persistent bash in ``box`` as the agent's user (see the module docstring).

    Args:
        box: the container (kept alive by another uid or by a root pid 1).
        user: the agent's ``uid:gid`` (default 65534, ``nobody``).
        workdir: the shell's first working directory.
        environment: the shell's initial environment (added to the image's).
        output_cap: bytes of output kept per command (head and tail halves).
        state_dir: where the shell saves its state after each command (the agent's user must
            be able to write there; on a volume when it must be read from outside).
    """

    def __init__(
        self,
        box: Box,
        *,
        user: str = f"{AGENT_UID}:{AGENT_UID}",
        workdir: str = "/app",
        environment: Mapping[str, str] | None = None,
        output_cap: int = 10_000,
        state_dir: str = STATE_DIR,
        pad: int = 2,
    ) -> None:
        self.box = box
        self.user = user
        self.state_dir = state_dir
        self.workdir = workdir
        self.environment = dict(environment or {})
        self.output_cap = int(output_cap)
        self.cwd = workdir
        self.pid: int | None = None
        self.restarts = 0
        self._stream: ProcessStream | None = None
        self._pending = b""  # output that came after the last marker (a background job's)
        self.line = 0  # lines of the protocol this shell has read since its prelude
        self._start(pad)

    # ------------------------------------------------------------------ lifecycle
    def _start(self, pad: int = 2) -> None:
        """A clean shell (no saved state loaded) in the first working directory.

        bash numbers the lines it reads, and its error messages say ``line N``. A fresh shell
        reads ``pad`` (2) blank lines after the prelude; a shell that will load a state starts
        with none and reads two lines in :meth:`load_state` (the state and a probe), then
        blank lines up to the count of the shell the state was saved from: either way the
        next command's line number is what the original shell's would have been.
        """
        stream = self.box.process(
            ["bash", "--noprofile", "--norc"],
            user=self.user,
            workdir=self.workdir,
            environment=self.environment,
        )
        self._stream = stream
        self._pending = b""
        self.cwd = self.workdir
        nonce = secrets.token_hex(8)
        script = _PRELUDE.format(state=self.state_dir)
        script += f"__mte_save; printf '%s %s\\n' {nonce} $$\n" + "\n" * pad
        stream.send(script.encode())
        self.line = pad
        text = bytearray()
        deadline = time.monotonic() + 30
        while b"\n" not in text.partition(nonce.encode())[2]:
            data = stream.read(deadline)
            if not data:
                stream.close()
                raise RuntimeError(f"the shell did not start: {bytes(text[-300:])!r}")
            text.extend(data)
            if len(text) > STATUS_CAP:
                del text[: len(text) - STATUS_CAP]
        self.pid = int(text.partition(nonce.encode())[2].split()[0])

    def kill_agent_processes(self) -> None:
        """Every process of the agent's user is gone when this returns (the shell included):
        :data:`KILL_SCRIPT` as that user, bounded by :data:`KILL_BOUND_S`. The keep-alive runs
        as another uid or is the namespace's init, and the agent has no ``CAP_KILL``, so the
        box survives. ``RuntimeError`` when processes survive the bound or the killer cannot
        start (a fork bomb holding every pid): the caller moves to a fresh box."""
        result = self.box.exec(
            ["bash", "--noprofile", "--norc", "-c", KILL_SCRIPT, "kill", str(KILL_BOUND_S)],
            user=self.user,
            timeout_s=KILL_BOUND_S + 10,
            output_cap=4096,
        )
        if result.exit_code != 0:
            why = result.output.decode("utf-8", "replace").strip()[-200:] or (
                "it did not finish" if result.timed_out else f"status {result.exit_code}"
            )
            raise RuntimeError(f"the agent's processes could not all be killed: {why}")

    def restart(self) -> bool:
        """Kill everything of the agent and start a shell with the last saved state.

        Returns ``False`` when the saved state could not be loaded (it stopped or hung the
        new shell) and a clean shell runs instead. Raises ``RuntimeError`` only when no shell
        can be started at all (the engine refuses the exec, e.g. while a fork bomb holds every
        pid): the caller moves to a fresh container."""
        if self._stream is not None:
            self._stream.close()
        last: Exception | None = None
        for _attempt in range(3):
            try:
                self.kill_agent_processes()
                break
            except EngineGone:
                raise
            except Exception as exc:  # survivors, or the engine refused the exec
                last = exc
        else:
            raise RuntimeError(f"the shell could not be restarted: {last}")
        self.restarts += 1
        state = self.saved_state()
        for _attempt in range(3):
            try:
                self._start(pad=0)
                return self.load_state(state)
            except EngineGone:
                raise
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
        loaded = self.restart()
        if timed_out:
            note = (
                f"[the command did not finish within {timeout_s:g} s and was killed, with every "
                "process it started; the shell was restarted]"
            )
        else:
            note = "[the shell exited or stopped answering; a new shell was started]"
        if loaded:
            note += f" [state restored: cwd {self.cwd}]"
        else:
            note += (
                " [the saved shell state could not be loaded (it stopped or hung the new "
                f"shell): a clean shell started in {self.cwd}]"
            )
        output = f"{partial}\n{note}" if partial else note
        return CommandResult(
            output,
            None,
            self.cwd,
            omitted,
            timed_out=timed_out,
            restarted=True,
            seconds=time.monotonic() - start,
            state_lost=not loaded,
        )

    def _roundtrip(self, command: str, timeout_s: float) -> CommandResult | None:
        """Send one command; its result, a partial one (``exit_code`` ``None``) at the
        deadline or when the stream ended after some output, or ``None`` when the stream ended
        with no output at all."""
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
        self.line += 1
        tag = ("\n" + nonce + " ").encode()
        keep = len(tag) - 1  # bytes held back: a tag split across two reads
        out = _CappedOutput(self.output_cap)
        carry = b""
        status: bytearray | None = None
        pending, self._pending = self._pending, b""
        deadline = time.monotonic() + timeout_s
        while True:
            if pending:
                data: bytes | None = pending
                pending = b""
            else:
                data = stream.read(deadline)
            if data is None or not data:  # the deadline, or the end of the stream
                if status is None:
                    out.add(carry)
                if data is None:
                    return self._partial(out, timed_out=True)
                return None if out.empty() else self._partial(out, timed_out=False)
            if status is None:
                buf = carry + data
                where = buf.find(tag)
                if where < 0:
                    cut = max(0, len(buf) - keep)
                    out.add(buf[:cut])
                    carry = buf[cut:]
                    continue
                out.add(buf[:where])
                status = bytearray(buf[where + len(tag) :])
            else:
                status.extend(data)
            if b"\n" not in status:
                if len(status) > STATUS_CAP:  # not our status line: the protocol is broken
                    return self._partial(out, timed_out=False)
                continue
            first, _, rest = bytes(status).partition(b"\n")
            self._pending = rest[-self.output_cap :] if rest else b""
            fields = first.split()
            try:
                rc = int(fields[0])
                cwd = base64.b64decode(fields[1]).decode("utf-8", "replace") if fields[1:] else ""
            except (ValueError, IndexError):
                return self._partial(out, timed_out=False)
            self.cwd = cwd or self.cwd
            return CommandResult(self._text(out), rc, self.cwd, out.omitted)

    def _partial(self, out: _CappedOutput, timed_out: bool) -> CommandResult:
        return CommandResult(self._text(out), None, self.cwd, out.omitted, timed_out=timed_out)

    @staticmethod
    def _text(out: _CappedOutput) -> str:
        if out.omitted:
            return (
                out.head.decode("utf-8", "replace")
                + cap_marker(out.omitted)
                + out.tail.decode("utf-8", "replace")
            )
        return (out.head + out.tail).decode("utf-8", "replace")

    # ------------------------------------------------------------------ state
    @property
    def state_file(self) -> str:
        """Where the shell saves its state after each command (see :meth:`saved_state`)."""
        return f"{self.state_dir}/state"

    def saved_state(self) -> str:
        """The shell's state after its last command, as bash text that recreates it.

        Read through the engine (no process in the container, so it works when the container
        can run none); ``""`` when the file is missing, is not a regular file or is larger
        than :data:`STATE_CAP` (the agent can write it: it is data, never trusted)."""
        data = read_small_file(self.box, self.state_file, STATE_CAP)
        return "" if data is None else data.decode("utf-8", "surrogateescape")

    def load_state(self, state: str, line: int | None = None) -> bool:
        """Recreate a state from :meth:`saved_state` in this shell (cwd, variables, functions);
        ``line``: the line count of the shell it was saved from (see :meth:`_start`).

        Returns ``False`` when the state stopped the shell or did not load within
        :data:`LOAD_TIMEOUT_S`: the shell is then replaced by a clean one (never an
        exception for what the state holds)."""
        result = self._roundtrip(state, LOAD_TIMEOUT_S)
        if result is not None and result.exit_code is not None:
            probe = self._roundtrip("true", LOAD_TIMEOUT_S)  # saves it as this shell's own
            if probe is not None and probe.exit_code is not None:
                if line is not None and line > self.line and self._stream is not None:
                    with contextlib.suppress(OSError):
                        self._stream.send(b"\n" * (line - self.line))
                        self.line = line
                return True
        # the state killed, hung or broke the shell: drop it
        if self._stream is not None:
            self._stream.close()
        try:
            self.kill_agent_processes()
        except EngineGone:
            raise
        except Exception:
            pass  # _start below fails too if the box is beyond use
        self._start(pad=2)
        return False
