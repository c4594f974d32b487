"""Reading a container's files through the engine's archive API in bounded memory and time.

``get_archive`` returns a tar of a path as the engine reads it (as root, whatever the files'
modes), which works even when the container can no longer run a process. The SDK's helper
hands back a generator over the HTTP response and no way to close it: a caller that stops
reading leaves the engine writing into a socket nobody drains, and anything that later waits
for the container (removing it) hangs. And a tar of a tree holding a sparse file is as large as
the file's apparent size (a 16 GiB ``truncate`` is 16 GiB of zeros on the wire).

:func:`read_archive` streams the response into a caller's file, checks every tar header as it
passes (:class:`TarGuard`: the declared sizes of the members, so a huge or sparse file is
refused when its header arrives, before its data is read), and on any refusal or error closes
the HTTP response for good.
"""

from __future__ import annotations

import contextlib
import socket
from typing import IO, Any

BLOCK = 512


class ArchiveTooLarge(RuntimeError):
    """A tree's archive would exceed the cap (sparse files count at their full size)."""

    def __init__(self, path: str, cap_bytes: int, seen_bytes: int) -> None:
        self.path = path
        self.cap_bytes = cap_bytes
        self.seen_bytes = seen_bytes
        super().__init__(
            f"{path} holds more than {cap_bytes // (1 << 20)} MiB of file data once archived "
            f"(at least {seen_bytes // (1 << 20)} MiB; a sparse file counts at its full size)"
        )


PATH_MAX = 4096
"""Linux's limit on a path, its final NUL included: the longest path any program can name."""


class PathTooLong(ArchiveTooLarge):
    """A tree holds a path longer than any program in a container can name (``PATH_MAX``): the
    checker could not unpack it and no snapshot could restore it, so the tree is refused as a
    too large one is."""

    def __init__(self, path: str, length: int) -> None:
        RuntimeError.__init__(
            self,
            f"{path} holds a path of {length:,} bytes, longer than any program can name "
            f"({PATH_MAX - 1:,})",
        )
        self.path = path
        self.cap_bytes = PATH_MAX - 1
        self.seen_bytes = length


def _octal_or_binary(field: bytes) -> int:
    """A tar numeric field: octal text, or GNU base-256 when the first byte's high bit is set."""
    if field and field[0] & 0x80:
        value = field[0] & 0x7F
        for byte in field[1:]:
            value = (value << 8) | byte
        return value
    text = field.split(b"\0", 1)[0].strip(b" \0")
    return int(text, 8) if text else 0


class TarGuard:
    """Follows a tar stream block by block and sums the data its headers declare.

    Understands ustar/GNU headers (octal and base-256 sizes) and PAX extended headers
    (a ``size=`` record overrides the next member's size). :meth:`feed` raises
    :class:`ArchiveTooLarge` as soon as the declared data passes ``cap_bytes``.
    """

    def __init__(self, path: str, cap_bytes: int) -> None:
        self.path = path
        self.cap_bytes = int(cap_bytes)
        self.declared = 0
        self._pending = bytearray()  # bytes of the current 512-byte block not yet complete
        self._skip = 0  # data bytes (padded to blocks) of the current member still to pass
        self._pax: bytearray | None = None  # collecting a PAX header's data
        self._pax_left = 0
        self._pax_size: int | None = None  # size override for the next member

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._skip:
                n = min(self._skip, len(view))
                if self._pax is not None:
                    take = min(n, self._pax_left)
                    self._pax.extend(view[:take])
                    self._pax_left -= take
                self._skip -= n
                view = view[n:]
                if not self._skip and self._pax is not None:
                    self._pax_size = self._parse_pax(bytes(self._pax))
                    self._pax = None
                continue
            need = BLOCK - len(self._pending)
            self._pending.extend(view[:need])
            view = view[need:]
            if len(self._pending) == BLOCK:
                self._header(bytes(self._pending))
                self._pending.clear()

    @staticmethod
    def _parse_pax(data: bytes) -> int | None:
        size: int | None = None
        rest = data
        while rest:
            length_text, _, _ = rest.partition(b" ")
            try:
                length = int(length_text)
            except ValueError:
                break
            record, rest = rest[:length], rest[length:]
            _, _, keyvalue = record.partition(b" ")
            key, _, value = keyvalue.rstrip(b"\n").partition(b"=")
            if key == b"size":
                with contextlib.suppress(ValueError):
                    size = int(value)
            if length <= 0:
                break
        return size

    def _header(self, block: bytes) -> None:
        if not block.strip(b"\0"):
            return  # end-of-archive padding
        size = _octal_or_binary(block[124:136])
        kind = block[156:157]
        padded = (size + BLOCK - 1) // BLOCK * BLOCK
        if kind in (b"x", b"g"):  # PAX header: its data are records, not file content
            self._pax = bytearray()
            self._pax_left = size
            self._skip = padded
            return
        if kind in (b"L", b"K"):  # GNU long name / link: small, not file data
            self._skip = padded
            return
        if self._pax_size is not None:
            size = self._pax_size
            padded = (size + BLOCK - 1) // BLOCK * BLOCK
            self._pax_size = None
        if kind in (b"0", b"\0", b"7", b"S"):  # regular files (and GNU sparse)
            self.declared += size
            if self.declared > self.cap_bytes:
                raise ArchiveTooLarge(self.path, self.cap_bytes, self.declared)
            self._skip = padded


def _close_response(response: Any) -> None:
    """Close the response AND its connection (the engine stops writing at once)."""
    with contextlib.suppress(Exception):
        raw = response.raw
        sock = getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None)
        inner = getattr(sock, "_sock", None)
        if inner is not None:
            inner.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        response.close()


def read_archive(
    api: Any, container_id: str, path: str, out: IO[bytes], cap_bytes: int, chunk: int = 1 << 16
) -> int:
    """Stream ``get_archive(path)`` of a container into ``out``; return the bytes written.

    Raises :class:`ArchiveTooLarge` when the members' declared data pass ``cap_bytes`` (or the
    raw stream passes ``cap_bytes`` plus room for headers), and the engine's errors
    (``docker.errors.NotFound`` for a missing path). The response is closed either way.
    """
    url = api._url("/containers/{0}/archive", container_id)
    response = api._get(
        url, params={"path": path}, stream=True, headers={"Accept-Encoding": "identity"}
    )
    guard = TarGuard(path, cap_bytes)
    raw_cap = int(cap_bytes) + (16 << 20)  # headers and padding on top of the data
    total = 0
    try:
        api._raise_for_status(response)
        for data in response.raw.stream(chunk, decode_content=False):
            guard.feed(data)
            total += len(data)
            if total > raw_cap:
                raise ArchiveTooLarge(path, cap_bytes, total)
            out.write(data)
        return total
    finally:
        _close_response(response)


class ContainerArchive:
    """``get_archive`` of one container through a low-level client: what
    :func:`read_small_file` reads from when the container is not a box (an image's holder)."""

    def __init__(self, api: Any, container_id: str) -> None:
        self.api, self.id = api, container_id

    def get_archive(self, path: str, out: IO[bytes], cap_bytes: int) -> int:
        return read_archive(self.api, self.id, path, out, cap_bytes)


def read_small_file(source: Any, path: str, cap_bytes: int) -> bytes | None:
    """The content of one regular file of a container (a box, or a :class:`ContainerArchive`:
    anything with ``get_archive(path, out, cap_bytes)``), or ``None`` when it is missing, is
    not a regular file (a FIFO, a link, a directory) or is larger than ``cap_bytes``."""
    import io
    import tarfile

    from multiturn_envs.sandbox.provider import EngineGone

    buf = io.BytesIO()
    try:
        source.get_archive(path, buf, cap_bytes)
    except EngineGone:
        raise  # the engine is away: not "no such file"
    except Exception:
        return None
    buf.seek(0)
    try:
        with tarfile.open(fileobj=buf, mode="r") as tar:
            member = tar.next()
            if member is None or not member.isreg():
                return None
            handle = tar.extractfile(member)
            return handle.read(cap_bytes + 1)[:cap_bytes] if handle is not None else None
    except tarfile.TarError:
        return None
