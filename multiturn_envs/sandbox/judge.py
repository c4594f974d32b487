"""The judge (the sandbox's test runner): runs ONE program against ALL its tests, in a container
or a subprocess.

This file is a standalone script (standard library only, Python >= 3.9) so that backends can ship
it into a container as a file (``/job/runner.py`` there) and run it with the container's own
interpreter::

    python3 -I judge.py JOB_JSON

``JOB_JSON`` holds the tests (inputs AND expected outputs), the limits and the program's path.
The runner reads it and deletes it before any submitted code runs, so the program cannot read
the expected outputs from disk; the runner also marks itself non-dumpable, so a program running
as the same uid cannot read the runner's memory or file descriptors through ``/proc``.

Why a zygote: starting a fresh interpreter per test costs ~10-15 ms; forking one costs ~1 ms.
Before it reads the tests, the runner forks a *zygote* (a copy that has never seen an expected
output). For each test the runner hands the zygote the test's pipes (``SCM_RIGHTS``); the zygote
forks a child that sets its limits, starts a new session and executes the program with fresh
``sys.stdin``/``sys.stdout``. Each test thus starts from the same pristine state, as with a
subprocess per test (judge semantics), at fork cost. If a program kills its parent (the
zygote), the runner starts a new one from a fresh interpreter.

Why a subreaper: the runner sets ``PR_SET_CHILD_SUBREAPER``, so every process a test leaves
behind (daemonised, double-forked, ``setsid``-ed) is re-parented to the runner, which kills all
of them after each test, and, with ``kill_all`` (the container case, where the code's uid owns
nothing else), also sends ``kill(-1, SIGKILL)`` at the end.

Time: each test has its own wall-clock limit (``timeout_s``, backed by ``RLIMIT_CPU``). With
``after_timeout="stop"`` the first test over its limit ends the run; with ``deadline_s`` the
whole run has a wall-clock cap (a test running when it passes is killed). Tests that were not
run get a ``{"not_run": true}`` line saying why, so a looping program costs one limit, not one
per test.

Output: one JSON object per line on stdout, one per test as it finishes (so a runner killed
halfway still reports the tests it ran), then ``{"done": true}``.

Comparison (judge style, see :func:`outputs_match`): stdout and expected are stripped and split
into lines; line counts must match; each line matches when its whitespace-separated tokens are
equal one by one as strings, or as exact decimals (``1.0`` = ``1``, ``1e3`` = ``1000``), or, with
``numeric_tolerance``, as floats within that absolute or relative tolerance. Functional results
compare as JSON values (tuples become lists), floats within ``numeric_tolerance`` when set.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import functools
import json
import math
import os
import resource
import select
import signal
import socket
import sys
import time

TYPE_CHECKING = False  # typing costs ~2 ms of start-up, on the clock of every submission
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
RESULT_FD = 3
CHUNK = 65536


# ---------------------------------------------------------------------------------------------
# Output comparison (pure functions; unit-tested on the host)
# ---------------------------------------------------------------------------------------------


def _token_equal(a: str, b: str, tolerance: float | None) -> bool:
    if a == b:
        return True
    from decimal import Decimal, InvalidOperation  # lazily: the runner's start-up is on the clock

    try:
        da, db = Decimal(a), Decimal(b)
    except (InvalidOperation, ValueError):
        return False
    if not (da.is_finite() and db.is_finite()):
        return False
    if da == db:
        return True
    if tolerance is None:
        return False
    fa, fb = float(da), float(db)
    return math.isclose(fa, fb, rel_tol=tolerance, abs_tol=tolerance)


def outputs_match(actual: str, expected: str, tolerance: float | None = None) -> bool:
    """Judge-style stdout comparison: whitespace-tolerant lines and tokens, decimal-aware."""
    a_lines = actual.strip().splitlines()
    e_lines = expected.strip().splitlines()
    if len(a_lines) != len(e_lines):
        return False
    for a_line, e_line in zip(a_lines, e_lines):
        if a_line.strip() == e_line.strip():
            continue
        a_tok, e_tok = a_line.split(), e_line.split()
        if len(a_tok) != len(e_tok):
            return False
        if not all(_token_equal(x, y, tolerance) for x, y in zip(a_tok, e_tok)):
            return False
    return True


def values_match(actual: Any, expected: Any, tolerance: float | None = None) -> bool:
    """Functional-test comparison of two JSON values (lists and tuples alike)."""
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(
            values_match(x, y, tolerance) for x, y in zip(actual, expected)
        )
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            values_match(actual[k], expected[k], tolerance) for k in actual
        )
    if (
        tolerance is not None
        and isinstance(actual, (int, float))
        and isinstance(expected, (int, float))
        and not isinstance(actual, bool)
        and not isinstance(expected, bool)
    ):
        return math.isclose(actual, expected, rel_tol=tolerance, abs_tol=tolerance)
    return bool(actual == expected)


def parse_arguments(text: str) -> list[Any]:
    """The positional arguments of a functional test.

    The contract is a JSON array of arguments. LiveCodeBench's own shape (one JSON value per
    line, one line per argument) is accepted too when the whole text is not one JSON value.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(value, list):
        return value
    return [value]


def to_jsonable(value: Any) -> Any:
    """Tuples become lists, recursively (LCB's grading rule); sets become sorted lists."""
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(to_jsonable(v) for v in value)
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: to_jsonable(v) for k, v in value.items()}
    return value


def truncate(text: str, limit: int) -> str:
    """Head and tail of ``text`` within about ``limit`` characters."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]}...(truncated {len(text) - 2 * half} chars)...{text[-half:]}"


# ---------------------------------------------------------------------------------------------
# Process hygiene
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    """The C library, loaded once: each ``CDLL`` costs ~0.3 ms, paid per test otherwise."""
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> bool:
    try:
        return bool(_libc().prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def descendants(root: int) -> list[int]:
    """All live descendants of ``root`` (breadth first)."""
    found: list[int] = []
    frontier = [root]
    while frontier:
        nxt: list[int] = []
        for pid in frontier:
            for kid in _children(pid):
                if kid not in found:
                    found.append(kid)
                    nxt.append(kid)
        frontier = nxt
    return found


def reap() -> None:
    """Collect every exited child (orphans re-parented to us included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_strays(keep: set[int]) -> int:
    """SIGKILL every descendant of this process not in ``keep``; returns how many were killed."""
    me = os.getpid()
    killed = 0
    for _ in range(50):
        # a zygote's children are strays too, but the zygote itself is kept
        victims = [p for p in descendants(me) if p not in keep and not _is_zombie(p)]
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.002)
        reap()
    reap()
    return killed


def clear_dir(path: str) -> None:
    """Remove everything under ``path`` (the per-run scratch directory), keeping ``path``."""
    try:
        entries = os.listdir(path)
    except OSError:
        return
    for name in entries:
        full = os.path.join(path, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                for dirpath, dirnames, filenames in os.walk(full, topdown=False):
                    for fn in filenames:
                        os.unlink(os.path.join(dirpath, fn))
                    for dn in dirnames:
                        p = os.path.join(dirpath, dn)
                        if os.path.islink(p):
                            os.unlink(p)
                        else:
                            os.rmdir(p)
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            continue


# ---------------------------------------------------------------------------------------------
# The zygote and the test child
# ---------------------------------------------------------------------------------------------


def _print_exc() -> None:
    import traceback  # lazily: ~15-25 ms of imports a passing test never needs

    traceback.print_exc()


def _set_limits(spec: dict[str, Any]) -> None:
    cpu = math.ceil(spec["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fsize = int(spec.get("fsize_mb", 64)) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    if spec.get("memory_mb"):
        mem = int(spec["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    nofile = int(spec.get("nofile", 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    if spec.get("nproc"):
        n = int(spec["nproc"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))


def _test_child(program: Program, spec: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the test process, run the program, never return."""
    code = 1
    try:
        os.setsid()
        # move the received pipes out of the way first: one may sit on a target number
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]
        for target, fd in zip((0, 1, 2, RESULT_FD), high):
            os.dup2(fd, target)
        os.closerange(RESULT_FD + 1, 4096)
        os.chdir(spec["cwd"])
        uid = spec.get("uid")
        if uid is not None and os.getuid() == 0:
            os.setgroups([])
            os.setgid(int(spec.get("gid", uid)))
            os.setuid(int(uid))
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        os.umask(0o077)
        os.environ.clear()
        os.environ.update(spec.get("env", {}))
        _set_limits(spec)
        sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.argv = [program.path]
        code = _execute(program, spec)
    except SystemExit as exc:  # raised by the program outside _execute's own handling
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # the child must never fall back into the zygote's loop
        with contextlib.suppress(BaseException):
            _print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


class Program:
    """The submitted program as the zygote holds it: compiled once, executed by every test.

    A program that does not compile keeps its ``SyntaxError``, raised in each test's child so
    that the test reports it as the program's own error (exit status 1, traceback on stderr).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.code: Any = None
        self.error: BaseException | None = None
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                source = f.read()
        except OSError as exc:
            source = f"raise SystemExit({str(exc)!r})"
        try:
            self.code = compile(source, path, "exec")
        except Exception as exc:  # SyntaxError, ValueError (a NUL byte), RecursionError, ...
            self.error = exc


def _execute(program: Program, spec: dict[str, Any]) -> int:
    functional = spec["kind"] == "functional"
    namespace: dict[str, Any] = {
        "__name__": "solution" if functional else "__main__",
        "__file__": program.path,
        "__builtins__": __builtins__,
    }
    try:
        if program.error is not None:
            raise program.error
        compiled = program.code
        if not functional:
            exec(compiled, namespace)
            return 0
        args = parse_arguments(sys.stdin.read())
        exec(compiled, namespace)
        fn_name = spec.get("fn_name") or ""
        solution = namespace.get("Solution")
        if isinstance(solution, type) and hasattr(solution, fn_name):
            target = getattr(solution(), fn_name)
        elif callable(namespace.get(fn_name)):
            target = namespace[fn_name]
        else:
            print(
                f"NameError: the program defines no function or Solution method {fn_name!r}",
                file=sys.stderr,
            )
            return 1
        result = target(*args)
        try:
            payload = json.dumps(to_jsonable(result))
        except (TypeError, ValueError) as exc:
            print(f"TypeError: the return value is not JSON-serialisable: {exc}", file=sys.stderr)
            return 1
        with os.fdopen(RESULT_FD, "w", encoding="utf-8", closefd=False) as out:
            out.write(payload)
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        _print_exc()
        return 1


def _recv_message(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    fds = array.array("i")
    msg, ancdata, _, _ = sock.recvmsg(CHUNK, socket.CMSG_LEN(8 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if not msg:
        return None, list(fds)
    return json.loads(msg.decode()), list(fds)


def zygote_main(sock: socket.socket) -> None:
    """Fork one child per request; report its pid, then its exit status. Never returns.

    Each request names the program (``spec["program"]``): the zygote reads and compiles it once,
    on the first request that names it, so every test of a submission runs the same code object.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # never hold the runner's report channel
        os.dup2(devnull, fd)
    os.close(devnull)
    program: Program | None = None
    while True:
        try:
            spec, fds = _recv_message(sock)
        except (OSError, ValueError):
            os._exit(0)
        if spec is None:
            os._exit(0)
        if program is None or program.path != spec["program"]:
            program = Program(spec["program"])
        pid = os.fork()
        if pid == 0:
            sock.close()
            _test_child(program, spec, fds)
        for fd in fds:
            os.close(fd)
        try:
            sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            _, status, usage = os.wait4(pid, 0)
            sock.sendall(
                json.dumps({"status": status, "cpu_s": usage.ru_utime + usage.ru_stime}).encode()
                + b"\n"
            )
        except OSError:
            os._exit(0)


def _start_zygote(fork: bool) -> tuple[int, socket.socket]:
    """A zygote by plain fork of this process, or from a fresh interpreter.

    A fork shares this process's memory, so it is only taken before any test of any job was
    read (one job per process: :func:`run_job`). A session (:func:`serve`) has read earlier
    jobs, whose freed memory may still hold their expected outputs: its zygotes always start
    from a fresh interpreter, so that no test child can find them in its own memory.
    """
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if fork:
        pid = os.fork()
        if pid == 0:
            parent.close()
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            zygote_main(child)
        child.close()
        return pid, parent
    child.set_inheritable(True)
    pid = os.fork()
    if pid == 0:
        parent.close()
        os.execv(
            sys.executable,
            [sys.executable, "-I", os.path.abspath(__file__), "--zygote", str(child.fileno())],
        )
    child.close()
    return pid, parent


# ---------------------------------------------------------------------------------------------
# The runner proper
# ---------------------------------------------------------------------------------------------


class _Zygote:
    def __init__(self, fork: bool) -> None:
        self.pid, self.sock = _start_zygote(fork)
        self.buffer = b""

    def alive(self) -> bool:
        return self.pid in _children(os.getpid())

    def restart(self) -> None:
        self.close()
        self.pid, self.sock = _start_zygote(fork=False)
        self.buffer = b""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)

    def read_lines(self) -> list[dict[str, Any]] | None:
        """Non-blocking: messages available now; ``None`` when the zygote hung up."""
        try:
            data = self.sock.recv(CHUNK)
        except BlockingIOError:
            return []
        except OSError:
            return None
        if not data:
            return None
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line]


def _run_one(
    zygote: _Zygote, test: dict[str, Any], spec: dict[str, Any], job: dict[str, Any]
) -> dict[str, Any]:
    """One test: hand its pipes to the zygote, pump I/O under the deadline, kill leftovers."""
    limits = job["limits"]
    timeout = float(spec.get("timeout_s") or limits["timeout_s"])
    keep = int(limits["max_output_bytes"])
    expected = test["expected"]
    # generous enough for any whitespace variant of the right answer; past it the answer is wrong.
    # Every stream has it: a program past it on any stream is stopped at once (a flood on
    # stderr or on the result channel must cost what one on stdout costs, not the whole limit)
    out_cap = max(keep, 4 * len(expected) + CHUNK)
    pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, result
    child_ends = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
    stdin_w, out_r, err_r, res_r = pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]
    zygote.sock.setblocking(True)
    zygote.sock.sendmsg(
        [json.dumps(spec).encode()],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", child_ends))],
    )
    for fd in child_ends:
        os.close(fd)
    zygote.sock.setblocking(False)
    start = time.monotonic()
    deadline = start + timeout
    data = test["input"].encode("utf-8", errors="replace")
    bufs: dict[int, bytearray] = {out_r: bytearray(), err_r: bytearray(), res_r: bytearray()}
    caps = {out_r: out_cap, err_r: keep, res_r: out_cap}  # bytes kept
    sizes = {out_r: 0, err_r: 0, res_r: 0}  # bytes read (stderr past ``keep`` is dropped)
    names = {out_r: "", err_r: " (stderr)", res_r: " (the result channel)"}
    open_fds = {out_r, err_r, res_r}
    for fd in (stdin_w, out_r, err_r, res_r):
        os.set_blocking(fd, False)
    written = 0
    if not data:
        os.close(stdin_w)
        stdin_w = -1
    child_pid: int | None = None
    status: int | None = None
    timed_out = zygote_died = False
    flooded: str | None = None  # the stream that passed the output cap
    end_time: float | None = None
    while True:
        now = time.monotonic()
        if status is not None and (not open_fds or now > (end_time or now) + 0.5):
            break
        if status is None and now > deadline and not timed_out:
            timed_out = True
            if child_pid is not None:
                _killpg(child_pid)
        if timed_out and now > deadline + 5:  # the zygote never answered: give up on it
            zygote_died = True
            break
        rlist = [*open_fds, zygote.sock.fileno()]
        wlist = [stdin_w] if stdin_w >= 0 else []
        try:
            ready_r, ready_w, _ = select.select(rlist, wlist, [], 0.05)
        except InterruptedError:
            continue
        if ready_w:
            try:
                written += os.write(stdin_w, data[written : written + CHUNK])
            except BlockingIOError:
                pass
            except OSError:  # the program closed its stdin (or exited): drop the rest
                written = len(data)
            if written >= len(data):
                os.close(stdin_w)
                stdin_w = -1
        for fd in ready_r:
            if fd == zygote.sock.fileno():
                messages = zygote.read_lines()
                if messages is None:
                    zygote_died = True
                    if status is None:
                        status = -1
                        end_time = time.monotonic()
                        if child_pid is not None:
                            _killpg(child_pid)
                    continue
                for msg in messages:
                    if "pid" in msg:
                        child_pid = int(msg["pid"])
                        if timed_out or flooded is not None:
                            _killpg(child_pid)
                    elif "status" in msg:
                        status = int(msg["status"])
                        end_time = time.monotonic()
                        if child_pid is not None:
                            _killpg(child_pid)
                        kill_strays({zygote.pid})
                continue
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                open_fds.discard(fd)
                continue
            buf = bufs[fd]
            room = caps[fd] - len(buf)
            if room > 0:
                buf.extend(chunk[:room])
            sizes[fd] += len(chunk)
            if sizes[fd] > out_cap and flooded is None:
                flooded = names[fd]
                if child_pid is not None:
                    _killpg(child_pid)
        if zygote_died and status is not None and not open_fds:
            break
    elapsed = (end_time or time.monotonic()) - start
    if stdin_w >= 0:
        os.close(stdin_w)
    for fd in (out_r, err_r, res_r):
        os.close(fd)
    if child_pid is not None:
        _killpg(child_pid)
    kill_strays(set() if zygote_died else {zygote.pid})
    return _verdict(
        test,
        spec,
        job,
        bufs[out_r],
        bufs[err_r],
        bufs[res_r],
        status,
        elapsed,
        timed_out,
        flooded,
        zygote_died,
    )


def _killpg(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _verdict(
    test: dict[str, Any],
    spec: dict[str, Any],
    job: dict[str, Any],
    out: bytes | bytearray,
    err: bytes | bytearray,
    res: bytes | bytearray,
    status: int | None,
    elapsed: float,
    timed_out: bool,
    flooded: str | None,
    zygote_died: bool,
) -> dict[str, Any]:
    """The per-test report line: verdict first by limits, then by comparison.

    ``flooded``: ``None``, or the stream that passed the output cap (``""`` for stdout, else
    its name in parentheses, as the error shows it)."""
    limits = job["limits"]
    keep = int(limits["max_output_bytes"])
    tolerance = limits.get("numeric_tolerance")
    stdout = out.decode("utf-8", errors="replace")
    stderr = err.decode("utf-8", errors="replace")
    exit_status: int | None = None
    signalled: int | None = None
    if status is not None and status >= 0:
        if os.WIFEXITED(status):
            exit_status = os.WEXITSTATUS(status)
        elif os.WIFSIGNALED(status):
            signalled = os.WTERMSIG(status)
            exit_status = -signalled
    memory_killed = (not timed_out) and (
        "MemoryError" in stderr[-2000:]
        or (signalled == signal.SIGKILL and flooded is None and not zygote_died)
    )
    cpu_exceeded = signalled == signal.SIGXCPU
    actual = stdout
    passed = False
    error: str | None = None
    if zygote_died and not timed_out:
        error = "the program killed the test harness (its parent process)"
    elif (timed_out or cpu_exceeded) and spec.get("deadline_cut"):
        timed_out = True
        error = f"time limit exceeded (the submission's deadline, {limits['deadline_s']} s)"
    elif timed_out or cpu_exceeded:
        timed_out = True
        error = f"time limit exceeded ({limits['timeout_s']} s)"
    elif flooded is not None:
        error = f"output limit exceeded{flooded}"
    elif memory_killed:
        error = f"memory limit exceeded ({limits['memory_mb']} MB)"
    elif signalled is not None:
        error = f"killed by signal {signalled}"
    elif exit_status != 0:
        last = [line for line in stderr.strip().splitlines() if line.strip()]
        error = f"runtime error (exit status {exit_status})" + (f": {last[-1]}" if last else "")
    elif spec["kind"] == "functional":
        actual = res.decode("utf-8", errors="replace")
        try:  # the program may write fd 3 itself: text nested past json's recursion included
            got = json.loads(actual)
        except (ValueError, RecursionError):
            error = "runtime error: the function returned nothing readable"
        else:
            try:
                want = json.loads(test["expected"])
            except json.JSONDecodeError:
                passed = outputs_match(actual, test["expected"], tolerance)
            else:  # recursion bounded by the expected value's depth (the task's, trusted)
                passed = values_match(got, want, tolerance)
            if not passed:
                error = "wrong answer"
    else:
        passed = outputs_match(stdout, test["expected"], tolerance)
        if not passed:
            error = "wrong answer"
    return {
        "passed": passed,
        "actual": truncate(actual, keep),
        "stderr": truncate(stderr, keep),
        "exit_status": exit_status,
        "time_s": round(elapsed, 6),
        "timed_out": timed_out,
        "memory_killed": memory_killed and not timed_out,
        "error": error,
    }


def _read_exact(read: Callable[[int], bytes], n: int) -> bytes:
    parts: list[bytes] = []
    while n > 0:
        chunk = read(n)
        if not chunk:
            raise EOFError("the job ended early")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _read_header(read: Callable[[int], bytes]) -> dict[str, Any] | None:
    """A job's header (``None`` at a clean end of input, between jobs).

    :func:`run_job` reads it unbuffered (``os.read``): no byte of a test may sit in memory
    before the zygote is forked.
    """
    digits = b""
    while not digits.endswith(b"\n"):
        byte = read(1)
        if not byte:
            if digits:
                raise EOFError("the job's header was cut short")
            return None
        digits += byte
    header: dict[str, Any] = json.loads(_read_exact(read, int(digits)).decode("utf-8"))
    _read_exact(read, 1)  # the newline after the header
    return header


def _read_tests(lines: Any, n: int | None) -> list[dict[str, Any]]:
    """``n`` test lines (every remaining line when ``n`` is ``None``: a one-job input)."""
    tests: list[dict[str, Any]] = []
    if n == 0:
        return tests
    for line in lines:
        if line.strip():
            tests.append(json.loads(line))
        if n is not None and len(tests) == n:
            break
    if n is not None and len(tests) != n:
        raise EOFError(f"the job announced {n} tests but holds {len(tests)}")
    return tests


def _write_program(header: dict[str, Any]) -> None:
    if header.get("program_source") is not None:
        with open(header["program"], "w", encoding="utf-8") as f:
            f.write(header.pop("program_source"))
        os.chmod(header["program"], 0o644)


def _run_tests(
    header: dict[str, Any], tests: list[dict[str, Any]], zygote: _Zygote, out: Any
) -> None:
    """Every test of one job, one report line each as it finishes, then the cleanup and done."""
    scratch = header["scratch"]
    os.makedirs(scratch, exist_ok=True)
    if header.get("uid") is not None and os.getuid() == 0:
        os.chown(scratch, int(header["uid"]), int(header.get("gid", header["uid"])))
    os.chmod(scratch, 0o700)
    limits = header["limits"]
    timeout = float(limits["timeout_s"])
    deadline = limits.get("deadline_s")
    stop_after_timeout = limits.get("after_timeout", "stop") == "stop"
    start = time.monotonic()
    skip: str | None = None  # why the remaining tests are not run
    try:
        for index, test in enumerate(tests):
            left = None if deadline is None else float(deadline) - (time.monotonic() - start)
            if skip is None and left is not None and left <= 0.0:
                skip = f"the submission's deadline ({deadline} s) was reached"
            if skip is not None:
                out.write(json.dumps(_not_run(index, skip)) + "\n")
                out.flush()
                continue
            if not zygote.alive():
                zygote.restart()
            cut = left is not None and left < timeout
            spec = {
                "program": header["program"],
                "kind": test.get("kind", "stdio"),
                "fn_name": test.get("fn_name"),
                "cwd": scratch,
                "timeout_s": min(timeout, left) if cut and left is not None else timeout,
                "deadline_cut": cut,
                "cpu_s": timeout + 1.0,
                "memory_mb": limits.get("memory_mb"),
                "uid": header.get("uid"),
                "gid": header.get("gid"),
                "nproc": header.get("nproc"),
                "env": header.get("env", {}),
            }
            try:
                verdict = _run_one(zygote, test, spec, header)
            except Exception as exc:  # a harness bug must not lose the other tests
                verdict = _failed(f"runner error: {type(exc).__name__}: {exc}")
            verdict["i"] = index
            clear_dir(scratch)
            out.write(json.dumps(verdict) + "\n")
            out.flush()
            if verdict.get("timed_out"):
                if cut:
                    skip = f"the submission's deadline ({deadline} s) was reached"
                elif stop_after_timeout:
                    skip = f"test {index + 1} exceeded its time limit ({timeout} s)"
    finally:
        zygote.close()
        kill_strays(set())
        if header.get("kill_all"):
            # every process of the code's uid but this one
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(-1, signal.SIGKILL)
            reap()
        clear_dir(scratch)
        for path in header.get("wipe") or ():  # what the code may have left for a later job
            clear_dir(path)
    out.write(json.dumps({"done": True}) + "\n")
    out.flush()


def _failed(error: str) -> dict[str, Any]:
    """The verdict of a test that produced nothing (it counts as failed)."""
    return {
        "passed": False,
        "actual": "",
        "stderr": "",
        "exit_status": None,
        "time_s": 0.0,
        "timed_out": False,
        "memory_killed": False,
        "error": error,
    }


def _not_run(index: int, why: str) -> dict[str, Any]:
    """The report line of a test that was not run (it counts as failed)."""
    return {"i": index, **_failed(f"not run: {why}"), "not_run": True}


def run_job(job_path: str) -> int:
    """Run every test of ONE job (a file, or ``-`` for stdin); print one JSON line per test.

    The job: a decimal byte length and a newline, the JSON header of that length and a newline,
    then one JSON test per line.
    """
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    fd = 0 if job_path == "-" else os.open(job_path, os.O_RDONLY)
    header = _read_header(lambda n: os.read(fd, n))
    if header is None:
        raise EOFError("the job is empty")
    if header.get("guard_s"):  # the whole run's bound: SIGALRM's default action ends us
        signal.alarm(math.ceil(float(header["guard_s"])))
    _write_program(header)
    # fork the zygote BEFORE the tests are read: it must never hold an expected output
    zygote = _Zygote(fork=True)
    with os.fdopen(fd, "rb") as f:
        tests = _read_tests(f, header.get("n_tests"))
    if job_path != "-":
        with contextlib.suppress(OSError):
            os.unlink(job_path)
    _run_tests(header, tests, zygote, sys.stdout)
    return 0


def serve() -> int:
    """Run jobs from stdin one after another, until it closes: a session of one container.

    Each request is a job (as for :func:`run_job`, with ``n_tests`` in its header), or a header
    ``{"job_file": PATH}`` naming a job file, which is read and deleted before any code runs.
    Every job's report ends with ``{"done": true}``; then the next request is read. A session
    saves a container exec per submission (~50 ms of latency and as much host CPU, the
    engine's floor) and the interpreter's start-up; it keeps what one exec per job guarantees:
    every job starts a fresh zygote from a new interpreter (no test child can find an earlier
    job's tests in its memory, see :func:`_start_zygote`), and ends with every process of the
    code's uid killed (``kill_all``) and the writable places wiped (``wipe``). The zygote of
    the next job starts as soon as a job is done, while the host reads the report.
    """
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    stdin = os.fdopen(0, "rb")
    zygote = _Zygote(fork=False)
    while True:
        request = _read_header(stdin.read)
        if request is None:
            zygote.close()
            return 0
        if request.get("job_file"):
            path = str(request["job_file"])
            with open(path, "rb") as f:
                header = _read_header(f.read)
                if header is None:
                    raise EOFError(f"the job file {path} is empty")
                tests = _read_tests(f, header.get("n_tests"))
            with contextlib.suppress(OSError):
                os.unlink(path)
        else:
            header = request
            tests = _read_tests(stdin, header.get("n_tests"))
        if header.get("guard_s"):
            signal.alarm(math.ceil(float(header["guard_s"])))
        _write_program(header)
        _run_tests(header, tests, zygote, sys.stdout)
        signal.alarm(0)
        del header, tests
        zygote = _Zygote(fork=False)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--zygote":
        sock = socket.socket(fileno=int(argv[1]))
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        zygote_main(sock)
        return 0
    if argv == ["--serve"]:
        return serve()
    if len(argv) != 1:
        print("usage: judge.py JOB_JSONL | judge.py --serve", file=sys.stderr)
        return 2
    return run_job(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
