"""Tars of files for the engine's ``put_archive``: a task's files into the agent's container,
the tests into the checker's (parents listed once, paths sorted, so equal files give equal
bytes)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping

__all__ = ["files_tar"]


def files_tar(
    files: Mapping[str, str | bytes],
    uid: int = 65534,
    mode: int | Callable[[str], int] = 0o644,
    mtime: int = 0,
) -> bytes:
    """A tar of ``files`` (relative paths), owned by ``uid``, for ``put_archive``; ``mode``:
    every file's, or a function of its path."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files):
            parts = path.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                if folder not in dirs:
                    dirs.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, uid
                    info.mtime = mtime
                    tar.addfile(info)
            content = files[path]
            data = content.encode("utf-8") if isinstance(content, str) else content
            info = tarfile.TarInfo(path)
            info.size, info.uid, info.gid = len(data), uid, uid
            info.mode = mode(path) if callable(mode) else mode
            info.mtime = mtime
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
