"""Output files the project writes (JSON results, plots, exported logs): never a user's file.

The rule, the same for every output (records have their own, :mod:`~multiturn_envs.harness.
records`): a path that does not exist is written; an existing file is replaced only when the
caller asks to (``overwrite``, the CLI's ``--overwrite``) AND the file carries this project's
marker, proof that the project wrote it; anything else (a file without the marker, a
directory, a link, a FIFO) is refused with an :class:`~multiturn_envs.errors.OutputFileError`
naming it, and stays byte for byte as it was.

The markers: a JSON output is an object with ``"written_by": "multiturn-envs <version>"``
(:func:`marked`); a PNG carries a ``tEXt`` chunk whose keyword is ``multiturn-envs``
(:data:`PNG_METADATA`, given to matplotlib's ``savefig``); an inspect log carries
``eval.metadata["multiturn_envs"]`` (:mod:`~multiturn_envs.harness.inspect_log` checks it).
Checking reads at most :data:`MAX_CHECK_BYTES` of the file.

A file appears whole: it is written beside its path under a temporary name, then linked into
place (a new file: a file that appeared meanwhile is not clobbered) or moved over the old one.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import struct
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from multiturn_envs.errors import OutputFileError, UntrustedInputError
from multiturn_envs.safejson import JSONLimitError, loads_bounded
from multiturn_envs.untrusted import open_regular
from multiturn_envs.version import __version__

__all__ = [
    "JSON_MARKER_KEY",
    "MAX_CHECK_BYTES",
    "PNG_KEYWORD",
    "PNG_METADATA",
    "check_output",
    "json_is_ours",
    "marked",
    "png_is_ours",
    "write_json_output",
    "write_output",
    "write_png",
]

JSON_MARKER_KEY = "written_by"
"""The key of a JSON output's marker (its value starts with ``multiturn-envs``)."""
PNG_KEYWORD = "multiturn-envs"
"""The ``tEXt`` keyword of a PNG this project wrote."""
PNG_METADATA = {PNG_KEYWORD: "written by multiturn-envs"}
"""``savefig(..., metadata=PNG_METADATA)`` marks a plot as ours."""
MAX_CHECK_BYTES = 64 << 20
"""The most bytes read of an existing file to see whether it is ours."""

IsOurs = Callable[[Path], bool]


def marked(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` with this project's marker (a JSON output's first key)."""
    return {JSON_MARKER_KEY: f"multiturn-envs {__version__}", **payload}


def _head(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a regular file (``None``: not one, or not readable)."""
    try:
        fd = open_regular(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except (UntrustedInputError, OSError):
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limit + 1)
    except OSError:
        return None


def json_is_ours(path: Path) -> bool:
    """Whether ``path`` is a JSON object with this project's marker."""
    data = _head(path, MAX_CHECK_BYTES)
    if data is None or len(data) > MAX_CHECK_BYTES:
        return False
    try:
        obj = loads_bounded(data, max_bytes=MAX_CHECK_BYTES, max_depth=256)
    except (JSONLimitError, ValueError, RecursionError):
        return False
    marker = obj.get(JSON_MARKER_KEY) if isinstance(obj, dict) else None
    return isinstance(marker, str) and marker.startswith("multiturn-envs")


def png_is_ours(path: Path) -> bool:
    """Whether ``path`` is a PNG whose text chunks (before its image data) carry our keyword."""
    data = _head(path, 1 << 20)
    if data is None or not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return False
    pos = 8
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind in (b"IDAT", b"IEND"):
            return False
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"tEXt" and body.split(b"\x00", 1)[0] == PNG_KEYWORD.encode("latin-1"):
            return True
        pos += 12 + length
    return False


def check_output(path: str | os.PathLike[str], *, overwrite: bool, is_ours: IsOurs) -> bool:
    """Whether ``path`` may be written: ``False`` (new), ``True`` (ours, to replace), else an
    :class:`~multiturn_envs.errors.OutputFileError` (see the module docstring)."""
    target = Path(path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise OutputFileError(f"{target} exists and is {kind}; it is left as it is")
    if not is_ours(target):
        raise OutputFileError(
            f"{target} exists and this project did not write it; it is left as it is (name "
            "another file)"
        )
    if not overwrite:
        raise OutputFileError(
            f"{target} exists (written earlier by this project): overwrite it, or name another file"
        )
    return True


def write_output(
    path: str | os.PathLike[str],
    write: Callable[[str], None] | bytes,
    *,
    overwrite: bool,
    is_ours: IsOurs,
) -> Path:
    """Write an output file under the rule (module docstring); ``write`` is the bytes, or a
    function that writes the file it is given (``savefig``)."""
    target = Path(path)
    replace = check_output(target, overwrite=overwrite, is_ours=is_ours)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        if isinstance(write, bytes):
            with os.fdopen(fd, "wb") as fh:
                fh.write(write)
        else:
            os.close(fd)
            write(tmp)
        if replace:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise OutputFileError(
                    f"{target} appeared while it was written; it is left as it is"
                ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


def write_json_output(
    path: str | os.PathLike[str], payload: Mapping[str, Any], *, overwrite: bool
) -> Path:
    """``payload`` (marked as ours) as indented JSON at ``path``, under the rule."""
    text = json.dumps(marked(payload), indent=2, default=str) + "\n"
    return write_output(path, text.encode("utf-8"), overwrite=overwrite, is_ours=json_is_ours)


def write_png(path: str | os.PathLike[str], fig: Any, *, overwrite: bool) -> Path:
    """Save a matplotlib figure as a marked PNG under the rule (module docstring), and close
    it whether or not the file could be written (a refused output leaks no figure)."""
    import matplotlib.pyplot as plt

    try:
        return write_output(
            path,
            lambda tmp: fig.savefig(
                tmp, format="png", dpi=110, bbox_inches="tight", metadata=PNG_METADATA
            ),
            overwrite=overwrite,
            is_ours=png_is_ours,
        )
    finally:
        plt.close(fig)
