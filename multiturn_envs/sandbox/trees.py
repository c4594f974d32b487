"""The writable directories of a task's boxes and the trees that travel between boxes.

A task's boxes (:mod:`.task_box`: the agent's and the checker's) mount the task's **writable
directories** (:class:`Layout`) as size-capped tmpfs volumes: the only places anything in the
box can write. This module moves their contents: :func:`read_state` reads them out of a box
through its provider, one capped stream each (``get_archive``:
:mod:`multiturn_envs.sandbox.archive_stream`), into spooled temporary files (a state never
sits in memory more than once, and a tree too large, a sparse file counted at its full size, is
refused when its header arrives); :meth:`State.trees` re-roots them; :func:`put_trees` puts
them into another box (on this engine or any other: the trees are the exact snapshot of a
box's files, with owners, modes and times).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import posixpath
import shlex
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from multiturn_envs.sandbox.archive_stream import ArchiveTooLarge
from multiturn_envs.sandbox.provider import Box, TmpfsVolume

SPOOL_BYTES = 8 << 20
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

    def volumes(self) -> tuple[TmpfsVolume, ...]:
        """The writable directories as the provider's tmpfs volumes."""
        return tuple(
            TmpfsVolume(w.path, self.size_mb, w.uid, w.gid, w.mode & 0o7777) for w in self.writable
        )


# ---------------------------------------------------------------------- trees
ENGINE_FILES = {"/etc": frozenset({"hostname", "hosts", "resolv.conf"})}
"""Files the engine bind-mounts into every container (read-only here): never part of a tree
put into one (replacing them fails) and never extracted by the checker."""


def _rename(member: tarfile.TarInfo, name: str, hard_target: str | None) -> None:
    """Give a member a new archive name (and a hard link its target's); the mount's root
    (``.``) loses its time. A PAX record of the old name, link target or time would win over
    the new fields when the member is written again (a long or non-ASCII name came back under
    its old top: ``/app/app/...``), so those records go and are rewritten as needed."""
    member.pax_headers = {
        k: v for k, v in member.pax_headers.items() if k not in ("path", "linkpath", "mtime")
    }
    member.name = name
    if hard_target is not None:
        member.linkname = hard_target
    if name == ".":  # the mount's root: the engine sets its time when it unpacks into it
        member.mtime = 0


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
            # hard links name their target by its archive path
            target = member.linkname.partition("/")[2] or "." if member.islnk() else None
            _rename(member, rest or ".", target)
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
                link = member.linkname.strip("/").partition("/")[2] or "."
                _rename(member, rest or ".", link if member.islnk() else None)
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


def put_trees(box: Box, trees: Mapping[str, bytes], root: bool = False) -> None:
    """Put re-rooted trees (:func:`retop`) into a box's writable directories.

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
        box.put_archive(path, data)
    for link in links:
        q = shlex.quote
        where = q(link.path)
        script = f"ln -sfn -- {q(link.target)} {where} && touch -h -d @{link.mtime} {where}"
        if root:
            script += f" && chown -h {link.uid}:{link.gid} {where}"
        user = "0:0" if root else f"{link.uid}:{link.gid}"
        result = box.exec(["sh", "-c", script], user=user, timeout_s=60, output_cap=4096)
        if result.exit_code != 0:
            raise RuntimeError(f"could not make the link {link.path}: {result.output[-300:]!r}")


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

    def seal(self) -> None:
        """Set both digests from the parts, once they are read."""
        raw = hashlib.sha256()
        for part in self.parts:
            raw.update(part.path.encode() + b"\0")
            for data in self.chunks(part):
                raw.update(data)
        self.digest = raw.hexdigest()
        self.content_digest = content_digest([(p.path, p.file, False) for p in self.parts])

    def close(self) -> None:
        for part in self.parts:
            with contextlib.suppress(Exception):
                part.file.close()
        self.parts = []


def content_digest(parts: Sequence[tuple[str, IO[bytes], bool]]) -> str:
    """A digest of trees' names, types, modes (permission bits: the engine's tars carry the
    type bits too, Python's do not), link targets and contents (not times, owners,
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
                mode = member.mode & 0o7777
                one = hashlib.sha256(
                    f"{where}\0{rest}\0{member.type!r}\0{mode:o}\0{member.linkname}\0".encode(
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


def read_state(box: Box, paths: Sequence[str], cap_bytes: int, workers: int = 4) -> State:
    """The writable directories ``paths`` of a box (see :class:`State`), read in
    parallel (one engine request each); trees past ``cap_bytes`` (all together) set
    ``too_large`` instead of raising."""
    from concurrent.futures import ThreadPoolExecutor

    def one(path: str) -> StatePart | ArchiveTooLarge:
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        try:
            size = box.get_archive(path, spool, int(cap_bytes))
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
    state.seal()
    return state


def top_level_writable(names: Sequence[str]) -> list[str]:
    """A root agent's writable directories from an image's top-level directory names."""
    return sorted(
        posixpath.join("/", n) for n in names if n not in SYSTEM_DIRS and n not in RESERVED
    )
