"""The containers of MT/Terminal-v0 and the trees that travel between them.

Every container of a task is made from the task's image by the sandbox's
``DockerSandbox.hardened_container`` (no network, read-only root, no capabilities unless
listed below, ``no-new-privileges``, pids / memory / CPU limits, ``RLIMIT_FSIZE``) with the
task's **writable directories** (:class:`Layout`) as size-capped tmpfs volumes. Those
volumes are the only places anything in the container can write; their pages count against
the container's memory limit, so no write reaches the host's disk, and an ``RLIMIT_FSIZE``
stops any single file (sparse ones included) at the same size.

* The agent's container: the writable directories filled with the task's starting state, a
  small volume for the shell's saved state (:data:`SHELL_STATE_DIR`), and, for a root agent,
  only the file capabilities (:data:`FILE_CAPS`: chown, override file modes; never
  ``CAP_KILL``). Its pid 1 is :data:`INIT` (root, not dumpable): ``kill -9 -1`` of any user
  leaves it, so the container survives.
* The checker's container (:mod:`.checker`): the same writable directories (empty until a job
  brings the agent's), ``/tests``, ``/logs`` and the runner's own volume, and the capabilities
  its runner needs to act as another uid (:data:`CHECKER_CAPS`).

:func:`read_state` reads the writable directories of a container through the engine, one
capped stream each (:mod:`multiturn_envs.sandbox.archive_stream`), into spooled temporary
files: a state never sits in memory more than once, and a tree too large (a sparse file counts
at its full size) is refused when its header arrives.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import posixpath
import shlex
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from multiturn_envs.sandbox.archive_stream import ArchiveTooLarge, read_archive

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
SPOOL_BYTES = 8 << 20
STATE_TAR_S = 60
"""How long the one-``tar`` read of a root agent's state may take (:func:`read_state_exec`)."""
"""A state part stays in memory up to this size, then spills to a temporary file."""
SYSTEM_DIRS = frozenset(
    {"bin", "boot", "dev", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "usr"}
)
"""Top-level directories never writable (the system: read-only, and the checker's runner
trusts them); with :data:`RESERVED` the rest of an image's top level is a root agent's."""
RESERVED = frozenset(
    {"logs", "tests", "job", "mte-shell", "mte-runner", "mte-home", "oracle", "solution"}
)
"""Top-level names the harnesses own: never part of an agent's state."""


@dataclass(frozen=True)
class WritableDir:
    """A writable directory: its path and the owner and mode of its top (the mount's root)."""

    path: str
    uid: int = 0
    gid: int = 0
    mode: int = 0o755


@dataclass(frozen=True)
class Layout:
    """What every container of a task mounts: ``image`` with the ``writable`` directories as
    tmpfs volumes of ``size_mb`` each (their sum is held by the memory limit)."""

    image: str
    writable: tuple[WritableDir, ...]
    size_mb: int = 256

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(w.path for w in self.writable)


def tmpfs_volume(path: str, size_mb: int, uid: int = 0, gid: int = 0, mode: int = 0o755) -> Any:
    """A size-capped tmpfs volume at ``path`` (exec allowed; removed with its container)."""
    from docker.types import DriverConfig, Mount

    options = f"size={int(size_mb)}m,uid={uid},gid={gid},mode={mode:04o},nosuid,nodev"
    return Mount(
        path,
        None,
        type="volume",
        driver_config=DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": options}),
    )


def layout_mounts(layout: Layout) -> list[Any]:
    return [
        tmpfs_volume(w.path, layout.size_mb, w.uid, w.gid, w.mode & 0o7777) for w in layout.writable
    ]


def agent_container(sandbox: Any, layout: Layout, root: bool) -> Any:
    """A new agent's container (empty writable directories; see the module docstring)."""
    from multiturn_envs.sandbox.shell_session import AGENT_UID

    shell = tmpfs_volume(SHELL_STATE_DIR, SHELL_STATE_MB, AGENT_UID if not root else 0)
    mounts = [*layout_mounts(layout), shell]
    tmpfs: dict[str, str] | None = {} if "/tmp" in layout.paths else None
    caps = FILE_CAPS if root else ()
    return sandbox.hardened_container(
        mounts,
        runner=False,
        tmpfs=tmpfs,
        cap_add=caps,
        fsize_mb=layout.size_mb,
        keepalive=KEEPALIVE,
    )


def checker_container(sandbox: Any, layout: Layout) -> Any:
    """A new checker's container (see the module docstring)."""
    mounts = [
        *layout_mounts(layout),
        tmpfs_volume(TESTS_DIR, layout.size_mb),
        tmpfs_volume(LOGS_DIR, 16),
        tmpfs_volume(RUNNER_DIR, 16),
        tmpfs_volume(CHECK_HOME, 16, mode=0o755),
    ]
    tmpfs: dict[str, str] | None = {} if "/tmp" in layout.paths else None
    return sandbox.hardened_container(
        mounts,
        runner=False,
        tmpfs=tmpfs,
        cap_add=CHECKER_CAPS,
        fsize_mb=layout.size_mb,
        keepalive=KEEPALIVE,
    )


def remove(container: Any) -> None:
    with contextlib.suppress(Exception):
        container.remove(force=True, v=True)


# ---------------------------------------------------------------------- trees
ENGINE_FILES = {"/etc": frozenset({"hostname", "hosts", "resolv.conf"})}
"""Files the engine bind-mounts into every container (read-only here): never part of a tree
put into one (replacing them fails) and never extracted by the checker."""


def retop(archive: IO[bytes], out: IO[bytes], path: str = "") -> None:
    """A ``get_archive(path)`` tar (members ``name/...``) re-rooted for ``put_archive(path)``:
    the top directory becomes ``.``, so the engine applies its owner and mode to the
    destination itself (its time is not kept: the engine sets it when it unpacks); the
    engine's own files (:data:`ENGINE_FILES`) are left out."""
    skip = ENGINE_FILES.get(path, frozenset())
    with (
        tarfile.open(fileobj=archive, mode="r|") as src,
        tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in src:
            _top, _, rest = member.name.partition("/")
            if rest in skip:
                continue
            member.name = rest or "."
            if not rest:  # the mount's root: the engine sets its time when it unpacks into it
                member.mtime = 0
            if member.islnk():  # hard links name their target by its archive path
                member.linkname = member.linkname.partition("/")[2] or "."
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)


def split_tops(archive: IO[bytes]) -> dict[str, bytes]:
    """A tar of several writable directories (members ``<top>/...``) as one re-rooted tree
    each (see :func:`retop`)."""
    writers: dict[str, tuple[io.BytesIO, tarfile.TarFile]] = {}
    try:
        with tarfile.open(fileobj=archive, mode="r|") as src:
            for member in src:
                top, _, rest = member.name.strip("/").partition("/")
                path = "/" + top
                if rest in ENGINE_FILES.get(path, frozenset()):
                    continue
                if path not in writers:
                    buf = io.BytesIO()
                    writer = tarfile.open(  # noqa: SIM115 - closed below
                        fileobj=buf, mode="w", format=tarfile.PAX_FORMAT
                    )
                    writers[path] = (buf, writer)
                member.name = rest or "."
                if not rest:
                    member.mtime = 0
                if member.islnk():
                    member.linkname = member.linkname.strip("/").partition("/")[2] or "."
                writers[path][1].addfile(
                    member, src.extractfile(member) if member.isreg() else None
                )
    finally:
        for _buf, writer in writers.values():
            writer.close()
    return {path: buf.getvalue() for path, (buf, _w) in writers.items()}


def top_of(tree: bytes) -> tuple[int, int, int] | None:
    """``(uid, gid, mode)`` of a re-rooted tree's top (its ``.`` member), if it has one."""
    with tarfile.open(fileobj=io.BytesIO(tree), mode="r|") as tar:
        for member in tar:
            if member.name in (".", "./"):
                return member.uid, member.gid, member.mode
            return None
    return None


@dataclass(frozen=True)
class _Link:
    path: str
    target: str
    uid: int
    gid: int
    mtime: int


def _outward_links(path: str, tree: bytes) -> tuple[bytes, list[_Link]]:
    """The tree without its symbolic links whose relative target leaves ``path`` (the engine
    refuses to unpack those), and those links."""
    links: list[_Link] = []
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(tree), mode="r|") as src,
        tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in src:
            if member.issym() and not member.linkname.startswith("/"):
                resolved = posixpath.normpath(
                    posixpath.join(posixpath.dirname(member.name), member.linkname)
                )
                if resolved == ".." or resolved.startswith("../"):
                    full = posixpath.normpath(posixpath.join(path, member.name))
                    links.append(
                        _Link(full, member.linkname, member.uid, member.gid, int(member.mtime))
                    )
                    continue
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
    return (out.getvalue() if links else tree), links


def put_trees(container: Any, trees: Mapping[str, bytes], root: bool = False) -> None:
    """Put re-rooted trees (:func:`retop`) into a container's writable directories.

    The engine refuses a symbolic link whose relative target leaves the directory it unpacks
    into (``/etc/os-release -> ../usr/lib/os-release``, or an agent's ``ln -s ../etc x``):
    those are made afterwards in the container, by their owner (or by root, with the file
    capabilities, in a root agent's container)."""
    links: list[_Link] = []
    for path, tree in trees.items():
        if not tree:
            continue
        data, outward = _outward_links(path, tree)
        links += outward
        if not container.put_archive(path, data):
            raise RuntimeError(f"put_archive into {path} failed")
    for link in links:
        q = shlex.quote
        where = q(link.path)
        script = f"ln -sfn -- {q(link.target)} {where} && touch -h -d @{link.mtime} {where}"
        if root:
            script += f" && chown -h {link.uid}:{link.gid} {where}"
        user = "0:0" if root else f"{link.uid}:{link.gid}"
        code, output = container.exec_run(["sh", "-c", script], user=user)
        if code != 0:
            raise RuntimeError(f"could not make the link {link.path}: {output[-300:]!r}")


@dataclass
class StatePart:
    """One tar of a state: of the writable directory ``path`` (members ``name/...``), or, with
    ``path`` ``"/"``, of several at once (members ``<top>/...``, ``tops`` their names)."""

    path: str
    file: IO[bytes]
    size: int
    tops: tuple[str, ...] = ()


class State:
    """A container's writable directories, each as the engine's tar, spooled (bounded memory).

    ``digest``: of the raw archives (names, contents, modes, owners and times: two states with
    equal digests are the same to any check); ``content_digest``: of names, types, modes, link
    targets and contents only (equal for the same files written at another time).
    ``too_large``: the refusal, when a tree passed the cap (then nothing else is set).
    """

    def __init__(self) -> None:
        self.parts: list[StatePart] = []
        self.digest = ""
        self.content_digest = ""
        self.too_large: ArchiveTooLarge | None = None

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    def chunks(self, part: StatePart, size: int = 1 << 16) -> Iterator[bytes]:
        part.file.seek(0)
        while True:
            data = part.file.read(size)
            if not data:
                return
            yield data

    def trees(self) -> dict[str, bytes]:
        """Each writable directory re-rooted for :func:`put_trees` (for snapshots)."""
        out: dict[str, bytes] = {}
        for part in self.parts:
            part.file.seek(0)
            if part.path != "/":
                buf = io.BytesIO()
                retop(part.file, buf, part.path)
                out[part.path] = buf.getvalue()
            else:
                out.update(split_tops(part.file))
        return out

    def close(self) -> None:
        for part in self.parts:
            with contextlib.suppress(Exception):
                part.file.close()
        self.parts = []


def content_digest(parts: Sequence[tuple[str, IO[bytes], bool]]) -> str:
    """A digest of trees' names, types, modes, link targets and contents (not times, owners,
    the order of the members or the engine's own files), the same for a tree read alone
    (``(path, tar, False)``: members ``name/...``), re-rooted (``(path, tar, True)``) or read
    with others (``("/", tar, False)``: members ``<top>/...``)."""
    members: list[bytes] = []
    for path, handle, rerooted in parts:
        handle.seek(0)
        with tarfile.open(fileobj=handle, mode="r|") as tar:
            for member in tar:
                name = member.name.strip("/")
                if rerooted:
                    where, rest = path, "" if name in ("", ".") else name.removeprefix("./")
                else:
                    top, _, rest = name.partition("/")
                    where = f"/{top}" if path == "/" else path
                if rest in ENGINE_FILES.get(where, frozenset()):
                    continue
                one = hashlib.sha256(
                    f"{where}\0{rest}\0{member.type!r}\0{member.mode:o}\0{member.linkname}\0".encode(
                        "utf-8", "surrogateescape"
                    )
                )
                if member.isreg():
                    data = tar.extractfile(member)
                    while data is not None:
                        chunk = data.read(1 << 16)
                        if not chunk:
                            break
                        one.update(chunk)
                members.append(one.digest())
    return hashlib.sha256(b"".join(sorted(members))).hexdigest()[:16]


def read_state(
    api: Any, container_id: str, paths: Sequence[str], cap_bytes: int, workers: int = 4
) -> State:
    """The writable directories ``paths`` of a container (see :class:`State`), read in
    parallel (one engine request each); trees past ``cap_bytes`` (all together) set
    ``too_large`` instead of raising."""
    from concurrent.futures import ThreadPoolExecutor

    def one(path: str) -> StatePart | ArchiveTooLarge:
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        try:
            size = read_archive(api, container_id, path, spool, int(cap_bytes))
        except ArchiveTooLarge as exc:
            spool.close()
            return exc
        except BaseException:
            spool.close()
            raise
        return StatePart(path, spool, size)

    state = State()
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(paths)))) as pool:
        results = list(pool.map(one, paths))  # the first error is raised here
    parts = [r for r in results if isinstance(r, StatePart)]
    refused = [r for r in results if isinstance(r, ArchiveTooLarge)]
    state.parts = parts
    total = sum(p.size for p in parts)
    if refused or total > cap_bytes + (16 << 20):
        seen = sum(r.seen_bytes for r in refused) + total
        where = refused[0].path if refused else ", ".join(paths)
        state.close()
        state.too_large = ArchiveTooLarge(where, int(cap_bytes), seen)
        return state
    raw = hashlib.sha256()
    for part in state.parts:
        raw.update(part.path.encode() + b"\0")
        for data in state.chunks(part):
            raw.update(data)
    state.digest = raw.hexdigest()
    state.content_digest = content_digest([(p.path, p.file, False) for p in state.parts])
    return state


def read_state_exec(container: Any, paths: Sequence[str], cap_bytes: int) -> State | None:
    """The writable directories of a root agent's container with ONE ``tar`` run in it (root,
    with the file capabilities), instead of one engine request each (~50-100 ms apiece, a dozen
    for a root agent): ``None`` when it cannot run (no GNU tar, no process can start), and the
    caller reads them through the engine. Safe because the agent can only make this tar show
    a state it could have made itself: it owns every file of those directories anyway."""
    from multiturn_envs.sandbox.archive_stream import TarGuard
    from multiturn_envs.sandbox.shell_session import ExecStream

    tops = tuple(p.strip("/") for p in paths)
    if not tops or any("/" in t or not t for t in tops):
        return None
    script = (
        "tar -C / --sort=name --numeric-owner -cf - -- "
        + " ".join(shlex.quote(t) for t in tops)
        + " 2>/dev/null"
    )
    state = State()
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
    guard = TarGuard(", ".join(paths), int(cap_bytes))
    stream: ExecStream | None = None
    size = 0
    try:
        stream = ExecStream(
            container.client.api, container.id, ["sh", "-c", script], user="0:0", workdir="/"
        )
        deadline = time.monotonic() + STATE_TAR_S
        while True:
            data = stream.read(deadline)
            if data is None:
                raise TimeoutError("the state's tar did not finish")
            if not data:
                break
            guard.feed(data)
            size += len(data)
            if size > cap_bytes + (16 << 20):
                raise ArchiveTooLarge(", ".join(paths), int(cap_bytes), size)
            spool.write(data)
        info = container.client.api.exec_inspect(stream.exec_id)
        if info.get("ExitCode") not in (0, 1) or size < 1024:  # 1: files changed while read
            spool.close()
            return None
    except ArchiveTooLarge as exc:
        spool.close()
        state.too_large = exc
        return state
    except Exception:
        spool.close()
        return None
    finally:
        if stream is not None:
            stream.close()
    state.parts = [StatePart("/", spool, size, tops)]
    raw = hashlib.sha256(b"/\0")
    for data in state.chunks(state.parts[0]):
        raw.update(data)
    state.digest = raw.hexdigest()
    try:  # what planted code made this tar print is no tar: the caller reads the engine's
        state.content_digest = content_digest([("/", spool, False)])
    except (tarfile.TarError, OSError, ValueError):
        state.close()
        return None
    return state


def top_level_writable(names: Sequence[str]) -> list[str]:
    """A root agent's writable directories from an image's top-level directory names."""
    return sorted(
        posixpath.join("/", n) for n in names if n not in SYSTEM_DIRS and n not in RESERVED
    )
