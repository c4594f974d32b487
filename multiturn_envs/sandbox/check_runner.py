"""The checker's runner: it runs a task's tests INSIDE the checker's own container (standard
library only, started once per container as root, then its own uid).

No test ever runs in the agent's container. (The same file has a second role there, the state
keeper, :func:`keeper_main`: it reads and fills the writable directories for the host and runs
nothing; :mod:`multiturn_envs.sandbox.state_keeper` says why the agent cannot make it lie. It
shares this file's unpacking, so the state is unpacked by one piece of code on both sides.)

The host streams the runner one job at a time on stdin: a JSON
header line, then the agent's writable directories (the engine's tars) and the task's tests
(a tar). For each job it

1. kills every process of the tests' user and empties every place a test can write (the
   writable directories, ``/tests``, ``/logs``, the checks' ``HOME``), so nothing of an earlier
   job (another episode, another task) is left;
2. unpacks the trees into the writable directories with their owners, modes and times, and the
   tests into ``/tests`` (root's, read-only to the tests), itself, in Python: no program runs
   before the tests, so nothing the agent planted (a ``/etc/ld.so.preload``, a module) runs with
   the runner's rights;
3. runs each check as the task's verifier user, in its own session, under a time limit, with a
   fixed environment; an ``exit-status`` check is given to an execute-only copy of bash on a
   pipe, so it is not dumpable (a non-root test's code cannot read it through ``/proc``: not
   its argv, not its memory, not its file descriptors);
4. kills every process of that user after each check, reads what the verdict needs (the exit
   status it waited for, the output, ``/logs/verifier/reward.*`` opened without following
   links) and answers with one JSON line; then empties everything again.

The runner itself runs as :data:`RUNNER_UID` with the capabilities to act as the tests' user
and is not dumpable: the tests, as another uid without ``CAP_KILL``, can neither signal it nor
read its memory. Imports all happen at start-up, from the read-only system directories, before
any job is unpacked.

Protocol: header ``{"writable": [path, ...], "trees": [[path, nbytes, tops], ...] (path "/"
with the names of the writable directories it holds in tops: several in one tar), "tests":
nbytes, "verdict", "checks":
[{"name", "script"}], "user": "uid:gid", "workdir", "env": {...}, "timeout_s", "output_cap"}``,
then the bytes; answer ``{"results": [{"name", "passed", "exit_code", "timed_out", "output"}],
"reward_json": str | null, "reward_txt": str | null}`` or ``{"error": str}``.
"""

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from typing import Any, BinaryIO

RUNNER_UID = 65532
TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
RUNNER_DIR = "/mte-runner"
CHECK_HOME = "/mte-home"
CBASH = RUNNER_DIR + "/cbash"
HEADER_CAP = 1 << 20
REWARD_CAP = 1 << 16
KEEP_CAPS = (0, 1, 3, 4)  # CHOWN, DAC_OVERRIDE, FOWNER, FSETID: all a test may hold
CAP_LAST = 63
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_DUMPABLE = 4

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _caps_get() -> tuple[_CapHeader, Any]:
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    return header, data


def _caps_set(effective_from_permitted: bool = True, keep: tuple[int, ...] | None = None) -> None:
    header, data = _caps_get()
    for i in range(2):
        if keep is not None:
            mask = sum(1 << (c - 32 * i) for c in keep if 32 * i <= c < 32 * (i + 1))
            data[i].permitted &= mask
            data[i].inheritable = 0
        if effective_from_permitted:
            data[i].effective = data[i].permitted
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _become_runner() -> None:
    """Root with the checker's capabilities -> RUNNER_UID keeping them; not dumpable."""
    _libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setresgid(RUNNER_UID, RUNNER_UID, RUNNER_UID)
    os.setresuid(RUNNER_UID, RUNNER_UID, RUNNER_UID)
    _libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0)
    _caps_set()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _user(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    return int(uid), int(gid or uid)


def _become(uid: int, gid: int) -> None:
    """In a child: the tests' user, with at most the file capabilities (root) or none."""
    for cap in range(CAP_LAST + 1):
        if cap not in KEEP_CAPS:
            _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # from one non-zero uid to another the kernel keeps every capability: drop them here
    _caps_set(keep=KEEP_CAPS if uid == 0 else ())


def _has_processes(uid: int) -> bool:
    """Whether a process with ``uid`` among its real, effective, saved or file-system uids is
    left in the box (``/proc/<pid>/status``, readable for every process, dumpable or not). A
    new one can only come from one that is there, so none seen means none left."""
    wanted = str(uid).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if wanted in line.split()[1:]:
                            return True
                        break
        except OSError:
            continue  # gone meanwhile
    return False


def _kill_user(uid: int, gid: int) -> None:
    """Every process of ``uid`` (three passes: a fork bomb forks while the first one runs);
    no pass when none is left (the usual case: a check's session was killed already)."""
    if not _has_processes(uid):
        return
    pid = os.fork()
    if pid == 0:
        try:
            _become(uid, gid)
            for _ in range(3):
                with contextlib.suppress(OSError):
                    os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _wipe(paths: list[str]) -> None:
    for top in paths:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


class _Limited:
    """A file-like view of the next ``size`` bytes of stdin."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self.stream = stream
        self.left = size

    def read(self, n: int | None = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.stream.read(n)
        self.left -= len(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 16):
            pass


class BadArchive(Exception):
    pass


def _extract(reader: Any, parent: str, tops: set[str] | None) -> None:
    """Unpack a tar into ``parent``: every member under one of ``tops`` (``None``: any
    relative name), never through a symbolic link it made, with owners, modes and times."""
    links: set[str] = set()
    dirs: list[tuple[str, tarfile.TarInfo]] = []
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        for member in tar:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if member.name.startswith("/") or ".." in parts:
                raise BadArchive(f"member {member.name!r} leaves its directory")
            if tops is not None and (not parts or parts[0] not in tops):
                raise BadArchive(f"member {member.name!r} is not under {sorted(tops)}")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in links:
                    raise BadArchive(f"member {member.name!r} is under a link")
            rel = "/".join(parts)
            path = os.path.join(parent, rel) if rel else parent
            if rel and os.path.ismount(path):  # the engine's /etc/hosts and the like
                continue
            if member.isdir():
                if not os.path.lexists(path):
                    os.mkdir(path, 0o700)
                dirs.append((path, member))
                continue
            if os.path.lexists(path) and not os.path.isdir(path):
                os.unlink(path)
            if member.isreg():
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                try:
                    handle = tar.extractfile(member)
                    while handle is not None:
                        data = handle.read(1 << 16)
                        if not data:
                            break
                        os.write(fd, data)
                    os.fchown(fd, member.uid, member.gid)
                    os.fchmod(fd, member.mode & 0o7777)
                    os.utime(fd, (member.mtime, member.mtime))
                finally:
                    os.close(fd)
            elif member.issym():
                os.symlink(member.linkname, path)
                os.lchown(path, member.uid, member.gid)
                os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
                links.add(rel)
            elif member.islnk():
                target = [p for p in member.linkname.split("/") if p not in ("", ".")]
                if member.linkname.startswith("/") or ".." in target:
                    raise BadArchive(f"link {member.name!r} leaves its directory")
                os.link(os.path.join(parent, *target), path, follow_symlinks=False)
            elif member.isfifo():
                os.mkfifo(path, 0o600)
                os.chown(path, member.uid, member.gid)
                os.chmod(path, member.mode & 0o7777)
                os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
            # devices and the like: the agent could not make them either
    for path, member in reversed(dirs):
        os.lchown(path, member.uid, member.gid)
        os.chmod(path, member.mode & 0o7777)
        os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)


# ---------------------------------------------------------------------- the keeper role
KEEPER_MAX_DEPTH = 256
KEEPER_FRAME = 1 << 16
PATH_MAX = 4096  # Linux's, with the final NUL: no program names a longer path


class _TooLarge(Exception):
    def __init__(self, seen: int) -> None:
        super().__init__(seen)
        self.seen = seen


class _PathTooLong(Exception):
    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length


def _frame(out: BinaryIO, kind: bytes, payload: bytes) -> None:
    """One frame of the keeper's answer: a kind byte, a 4-byte length, the bytes."""
    out.write(kind + len(payload).to_bytes(4, "big") + payload)


class _Frames:
    """A file-like sink for ``tarfile``: ``d`` frames on ``out``; file data declared past
    ``cap`` (a sparse file at its full size) is refused before it is read, and the tar
    itself may pass it by 16 MiB of headers at most."""

    def __init__(self, out: BinaryIO, cap: int) -> None:
        self.out = out
        self.cap = cap
        self.declared = 0
        self.size = 0
        self.buf = bytearray()

    def declare(self, size: int) -> None:
        self.declared += size
        if self.declared > self.cap:
            raise _TooLarge(self.declared)

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.cap + (16 << 20):
            raise _TooLarge(self.size)
        self.buf.extend(data)
        if len(self.buf) >= KEEPER_FRAME:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buf:
            _frame(self.out, b"d", bytes(self.buf))
            self.buf.clear()


class _Exact:
    """The first ``size`` bytes of an open file, zero-padded when it shrank while read (what
    GNU tar does), so the tar member has exactly the size its header says."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = os.read(self.fd, n) if n else b""
        if len(data) < n:
            data += bytes(n - len(data))
        self.left -= len(data)
        return data


def _tarinfo(name: str, st: os.stat_result, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""  # numeric owners: never a lookup in the agent's /etc
    info.mtime = st.st_mtime_ns // 10**9  # whole seconds, as the engine's archive has them
    info.linkname = linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return info


def _add_tree(
    tar: tarfile.TarFile,
    frames: _Frames,
    dfd: int,
    name: str,
    st: os.stat_result,
    seen: dict[Any, str],
    depth: int,
    room: int,
) -> None:
    """``name`` (the open directory ``dfd``) and everything under it, sorted, every entry
    opened relative to its directory without following a link (an entry swapped for a link
    while read is skipped, never followed)."""
    tar.addfile(_tarinfo(name, st, tarfile.DIRTYPE))
    if depth > KEEPER_MAX_DEPTH:
        raise ValueError(f"{name}: more than {KEEPER_MAX_DEPTH} levels")
    for entry in sorted(os.listdir(dfd)):
        path = f"{name}/{entry}"
        length = len(path.encode("utf-8", "surrogateescape"))
        if length > room:  # the checker could not unpack it
            raise _PathTooLong(length + PATH_MAX - 1 - room)
        try:
            est = os.stat(entry, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while read
        mode = est.st_mode
        if est.st_dev != st.st_dev and not stat.S_ISREG(mode):
            continue  # another file system mounted here: not the agent's
        if stat.S_ISDIR(mode):
            try:
                cfd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                if exc.errno == 40:  # ELOOP: swapped for a link while read
                    continue
                raise
            try:
                _add_tree(tar, frames, cfd, path, os.fstat(cfd), seen, depth + 1, room)
            finally:
                os.close(cfd)
        elif stat.S_ISREG(mode):
            try:
                fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
            except (FileNotFoundError, OSError):
                continue  # removed or swapped while read
            try:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode):
                    continue
                key = (fst.st_dev, fst.st_ino)
                if fst.st_nlink > 1 and key in seen:
                    tar.addfile(_tarinfo(path, fst, tarfile.LNKTYPE, seen[key]))
                    continue
                if fst.st_nlink > 1:
                    seen[key] = path
                info = _tarinfo(path, fst, tarfile.REGTYPE)
                info.size = fst.st_size
                frames.declare(fst.st_size)
                tar.addfile(info, _Exact(fd, fst.st_size))
            finally:
                os.close(fd)
        elif stat.S_ISLNK(mode):
            try:
                target = os.readlink(entry, dir_fd=dfd)
            except OSError:
                continue
            tar.addfile(_tarinfo(path, est, tarfile.SYMTYPE, target))
        elif stat.S_ISFIFO(mode):
            tar.addfile(_tarinfo(path, est, tarfile.FIFOTYPE))
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            kind = tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE
            tar.addfile(_tarinfo(path, est, kind))
        # sockets: not kept, as by the engine's archive


def _keep_read(request: dict[str, Any], writable: list[str], out: BinaryIO) -> dict[str, Any]:
    """Each writable directory of ``paths`` as a tar of its own (members ``<name>/...``, as
    the engine's ``get_archive`` gives it): a ``p`` frame with its path, then ``d`` frames."""
    paths = [str(p) for p in request["paths"]]
    if any(p not in writable for p in paths):
        raise ValueError(f"not writable directories: {paths}")
    frames = _Frames(out, int(request["cap"]))
    sizes = []
    try:
        for path in paths:
            frames.flush()
            _frame(out, b"p", path.encode())
            start = frames.size
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                sink: Any = frames  # a file-like sink of writes only
                with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    name = os.path.basename(path.rstrip("/"))
                    room = PATH_MAX - 1 - (len(path.rstrip("/").encode()) - len(name.encode()))
                    _add_tree(tar, frames, fd, name, os.fstat(fd), {}, 0, room)
            finally:
                os.close(fd)
            frames.flush()
            sizes.append(frames.size - start)
    except _TooLarge as exc:
        frames.buf.clear()
        return {"too_large": exc.seen}
    except _PathTooLong as exc:
        frames.buf.clear()
        return {"path_too_long": exc.length}
    return {"sizes": sizes}


def _keep_put(request: dict[str, Any], writable: list[str], stdin: BinaryIO) -> dict[str, Any]:
    """A re-rooted tree (members ``.`` and ``name/...``) unpacked into a writable directory,
    as the engine's ``put_archive`` would: owners, modes and times, the top's time now."""
    path = str(request["path"])
    reader = _Limited(stdin, int(request["size"]))
    try:
        if path not in writable:
            raise ValueError(f"{path} is not a writable directory")
        _extract(reader, path, None)
        os.utime(path)
    finally:
        reader.drain()
    return {"ok": True}


def _keep_file(request: dict[str, Any], readable: list[str], out: BinaryIO) -> dict[str, Any]:
    """One small regular file of a ``readable`` directory in ``d`` frames (``missing``: it is
    not there, not a regular file, or larger than ``cap``); never through a link."""
    path, cap = str(request["path"]), int(request["cap"])
    if os.path.dirname(path) not in readable:
        raise ValueError(f"{path} is not in a readable directory")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {"missing": True}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return {"missing": True}
        data = bytearray()
        while len(data) <= cap:
            chunk = os.read(fd, KEEPER_FRAME)
            if not chunk:
                break
            data.extend(chunk)
        if len(data) > cap:
            return {"missing": True}
    finally:
        os.close(fd)
    for start in range(0, len(data), KEEPER_FRAME):
        _frame(out, b"d", bytes(data[start : start + KEEPER_FRAME]))
    return {"size": len(data)}


def keeper_main(argv: list[str]) -> None:
    """The keeper role: read and fill the AGENT's box's writable directories for the host
    (see :mod:`multiturn_envs.sandbox.state_keeper`). It runs no test and starts no program:
    root with the box's file capabilities, not dumpable, started before the agent's first
    command, answering requests (``{"op": "read", "paths", "cap"}``, ``{"op": "put", "path",
    "size"}`` + the tree, ``{"op": "file", "path", "cap"}``) with frames: ``p`` (a part's
    path) and ``d`` (its data), then one ``e`` (a JSON object). ``argv``: the writable
    directories, then ``--read`` and the directories whose small files it may read."""
    writable = argv[: argv.index("--read")] if "--read" in argv else list(argv)
    readable = argv[len(writable) + 1 :]
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    stdin = sys.stdin.buffer
    out = sys.stdout.buffer
    _frame(out, b"e", b'{"ready": true}')
    out.flush()
    while True:
        line = stdin.readline(HEADER_CAP)
        if not line:
            return
        try:
            request = json.loads(line)
            if request.get("op") == "read":
                answer = _keep_read(request, writable, out)
            elif request.get("op") == "put":
                answer = _keep_put(request, writable, stdin)
            elif request.get("op") == "file":
                answer = _keep_file(request, readable, out)
            else:
                answer = {"error": f"unknown request {request.get('op')!r}"}
        except Exception as exc:  # the host falls back to the engine for this one
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        _frame(out, b"e", json.dumps(answer).encode())
        out.flush()


def _read_reward(name: str) -> str | None:
    path = os.path.join(LOGS_DIR, "verifier", name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, REWARD_CAP).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _capture(
    proc: subprocess.Popen[bytes], deadline: float, cap: int
) -> tuple[bytearray, bytearray, int, bool]:
    """Read the check's output until it ends or the deadline; keep head and tail."""
    head, tail, omitted = bytearray(), bytearray(), 0
    half = cap // 8
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    ended_at: float | None = None
    while True:
        now = time.monotonic()
        if ended_at is None and proc.poll() is not None:
            ended_at = now  # a job it left behind may hold the pipe: a second more, no longer
        if ended_at is not None and now - ended_at > 1.0:
            return head, tail, omitted, False
        left = deadline - now
        if left <= 0:
            return head, tail, omitted, True
        ready, _, _ = select.select([fd], [], [], min(left, 0.25))
        if not ready:
            continue
        data = os.read(fd, 1 << 16)
        if not data:
            return head, tail, omitted, False
        room = half - len(head)
        if room > 0:
            head.extend(data[:room])
            data = data[room:]
        tail.extend(data)
        excess = len(tail) - (cap - half)
        if excess > 0:
            del tail[:excess]
            omitted += excess


def _run_check(
    check: dict[str, Any], job: dict[str, Any], uid: int, gid: int, verdict: str
) -> dict[str, Any]:
    script = check["script"]
    read_end = write_end = -1
    if verdict == "exit-status" and os.path.exists(CBASH):
        read_end, write_end = os.pipe()
        wrapper = f'IFS= read -r -d "" __mte_check <&{read_end}; exec {read_end}<&-; '
        argv = [CBASH, "-c", wrapper + 'eval "$__mte_check"']
    else:
        argv = ["/bin/bash", "-c", script]

    def child() -> None:
        _become(uid, gid)
        try:
            with open("/proc/self/oom_score_adj", "w") as f:  # the tests die first on OOM
                f.write("1000")
        except OSError:
            pass

    workdir = job.get("workdir") or "/"
    if not os.path.isdir(workdir):
        workdir = "/"
    proc = subprocess.Popen(
        argv,
        cwd=workdir,
        env=dict(job.get("env") or {}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=child,
        pass_fds=(read_end,) if read_end >= 0 else (),
    )
    if write_end >= 0:
        os.close(read_end)
        with contextlib.suppress(OSError):
            os.write(write_end, script.encode("utf-8", "surrogateescape") + b"\0")
        os.close(write_end)
    timeout = float(job.get("timeout_s", 30))
    head, tail, omitted, timed_out = _capture(
        proc, time.monotonic() + timeout, int(job.get("output_cap", 4000))
    )
    if timed_out:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        code = proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    _kill_user(uid, gid)
    text = head.decode("utf-8", "replace")
    if omitted:
        text += f"\n[... {omitted} bytes omitted ...]\n"
    text += tail.decode("utf-8", "replace")
    return {
        "name": check["name"],
        "passed": code == 0 and not timed_out,
        "exit_code": None if timed_out else code,
        "timed_out": timed_out,
        "output": text,
    }


def _job(header: dict[str, Any], stdin: BinaryIO) -> dict[str, Any]:
    uid, gid = _user(header["user"])
    writable = [str(p) for p in header["writable"]]
    if any(not p.startswith("/") or p == "/" or ".." in p.split("/") for p in writable):
        raise ValueError(f"bad writable directories {writable}")
    trees = [(str(t[0]), int(t[1]), [str(x) for x in t[2:3] and t[2]]) for t in header["trees"]]
    scratch = [*writable, TESTS_DIR, LOGS_DIR, CHECK_HOME]
    readers = [_Limited(stdin, size) for _, size, _ in trees]
    tests = _Limited(stdin, int(header.get("tests", 0)))
    _kill_user(uid, gid)
    _wipe(scratch)
    try:
        for (path, _, tops), reader in zip(trees, readers):
            if reader.left:
                if path == "/":  # several writable directories in one tar
                    _extract(reader, "/", {t for t in tops if "/" + t in writable})
                elif path in writable:
                    parent = os.path.dirname(path.rstrip("/")) or "/"
                    _extract(reader, parent, {os.path.basename(path)})
                else:
                    raise BadArchive(f"{path} is not a writable directory")
            reader.drain()
        if tests.left:
            _extract(tests, TESTS_DIR, None)
        tests.drain()
    except (BadArchive, tarfile.TarError, OSError) as exc:
        for reader in [*readers, tests]:
            reader.drain()
        return {"error": f"the state could not be unpacked: {exc}"}
    os.chown(TESTS_DIR, 0, 0)
    os.chmod(TESTS_DIR, 0o755)
    verifier = os.path.join(LOGS_DIR, "verifier")
    os.mkdir(verifier, 0o755)
    os.chown(verifier, uid, gid)
    os.chown(CHECK_HOME, uid, gid)
    verdict = header.get("verdict", "exit-status")
    results = [_run_check(c, header, uid, gid, verdict) for c in header["checks"]]
    answer: dict[str, Any] = {"results": results}
    if verdict == "reward-file":
        answer["reward_json"] = _read_reward("reward.json")
        answer["reward_txt"] = _read_reward("reward.txt")
    return answer


def _prepare_cbash() -> None:
    """An execute-only copy of bash: a process running it is not dumpable (for non-root)."""
    for source in ("/bin/bash", "/usr/bin/bash"):
        if os.path.exists(source):
            shutil.copyfile(source, CBASH)
            os.chown(CBASH, 0, 0)
            os.chmod(CBASH, 0o711)
            return


def main() -> None:
    _become_runner()
    _prepare_cbash()
    stdin = sys.stdin.buffer
    stdout = sys.stdout
    while True:
        line = stdin.readline(HEADER_CAP)
        if not line:
            return
        header: dict[str, Any] = {}
        try:
            header = json.loads(line)
            answer = _job(header, stdin)
        except Exception as exc:  # a bad job: say so (the host then replaces this runner)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            with contextlib.suppress(Exception):
                _kill_user(*_user(str(header.get("user", "65534:65534"))))
            writable = [str(p) for p in header.get("writable", []) if str(p) not in ("", "/")]
            _wipe([*writable, TESTS_DIR, LOGS_DIR, CHECK_HOME])
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


if __name__ == "__main__":
    main()
