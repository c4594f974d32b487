"""The tar-header guard of archive streams: the file data a tar declares is counted exactly as it
streams by, in any chunking, and a tree past the cap is refused at the header that passes it."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.sandbox.archive_stream import ArchiveTooLarge, TarGuard


def _tar(sizes: list[int], fmt: int, long_names: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        dirinfo = tarfile.TarInfo("d" * (150 if long_names else 1))
        dirinfo.type = tarfile.DIRTYPE
        tar.addfile(dirinfo)
        for i, size in enumerate(sizes):
            info = tarfile.TarInfo(f"{dirinfo.name}/f{i}" + ("x" * 120 if long_names else ""))
            info.size = size
            tar.addfile(info, io.BytesIO(b"a" * size))
            link = tarfile.TarInfo(f"{dirinfo.name}/l{i}")
            link.type, link.linkname = tarfile.SYMTYPE, "f0"
            tar.addfile(link)
    return buf.getvalue()


def _feed(guard: TarGuard, data: bytes, chunks: list[int]) -> None:
    pos = 0
    for size in chunks:
        guard.feed(data[pos : pos + size])
        pos += size
    guard.feed(data[pos:])


@given(
    sizes=st.lists(st.integers(0, 5000), max_size=8),
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    long_names=st.booleans(),
    chunks=st.lists(st.integers(1, 1500), max_size=30),
    cap=st.integers(0, 20000),
)
def test_the_guard_counts_declared_data_exactly_in_any_chunking(
    sizes: list[int], fmt: int, long_names: bool, chunks: list[int], cap: int
) -> None:
    if fmt == tarfile.USTAR_FORMAT and long_names:
        long_names = False  # ustar cannot hold the long names
    data = _tar(sizes, fmt, long_names)
    guard = TarGuard("/x", cap)
    if sum(sizes) > cap:
        with pytest.raises(ArchiveTooLarge):
            _feed(guard, data, chunks)
    else:
        _feed(guard, data, chunks)
        assert guard.declared == sum(sizes)


def test_a_sparse_or_huge_member_is_refused_at_its_header() -> None:
    # a PAX header declaring 16 GiB, then nothing: refused before any data arrives
    info = tarfile.TarInfo("app/huge")
    info.size = 16 << 30
    header = info.tobuf(tarfile.PAX_FORMAT)
    guard = TarGuard("/app", 256 << 20)
    with pytest.raises(ArchiveTooLarge, match="sparse file counts at its full size"):
        guard.feed(header)
    # GNU base-256 sizes are read too
    gnu = TarGuard("/app", 1 << 20)
    with pytest.raises(ArchiveTooLarge):
        gnu.feed(info.tobuf(tarfile.GNU_FORMAT))
