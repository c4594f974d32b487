"""Untrusted input: files, folders and fields someone else produced, read within bounds.

Task folders are downloaded, record files are handed around, configs and data files come from
anyone. Every reader of such input goes through this module, so the next reader cannot forget
a bound. Each refusal is an :class:`~multiturn_envs.errors.UntrustedInputError` (a
``ValueError``) whose message names the file, the field and the bound, never a
``RecursionError``, a ``MemoryError``, a hang or a traceback from deep inside a parser.

API (stable: names are added, never renamed)::

    Folder(root)                      a folder of untrusted files (a task folder)
      .read_bytes(rel, max_bytes=)    one regular file beneath the root, at most max_bytes
      .read_text(rel, max_bytes=, encoding="utf-8")
      .read_json / .read_yaml / .read_toml(rel, max_bytes=, max_depth=)
      .stat(rel) -> os.stat_result | None   (None: missing); .is_file, .is_dir, .exists
      .open(rel) -> BinaryIO          a regular file beneath the root, to stream
      .walk(rel="", max_entries=, max_depth=) -> list[Entry]   (links listed, not followed)
      .stream_tree(rel="", max_total_bytes=, ...) -> (Entry, open file | None) per entry
      .listdir(rel="", max_entries=) -> list[Entry]  one level of it
      .readlink(rel) -> str           a link's target text (the link's folder beneath the root)
      .read_tree(rel, max_file_bytes=, max_total_bytes=, ...) -> {posix path: bytes}
      .check_links(rel="")            every link under rel stays beneath the root
      .sub(rel) -> Folder             a folder beneath this one, itself a root
    read_bytes(path, max_bytes=), read_text(path, ...)       one file the user named
    load_json(path, ...), load_yaml(path, ...), load_toml(path, ...)
    parse_json(text, ...), parse_yaml(text, ...), parse_toml(text, ...)   (text in memory)
    open_regular(path, flags) -> fd   a regular file (never blocks on a FIFO), O_CLOEXEC
    value_depth(value) -> int         nesting of a parsed value, without recursion
    Fields(mapping, where=)           typed fields: .number, .integer, .text, .flag,
                                      .table, .text_map, .text_list, .get

The rules:

* **Paths stay inside their folder.** A :class:`Folder` resolves a relative path one component
  at a time from a descriptor of its root (``openat`` with ``O_NOFOLLOW``): ``..`` never goes
  above the root, an absolute path is refused, a symbolic link is followed only when its
  target, resolved the same way, stays beneath the root (at most 40 links). The file opened is
  the one checked: swapping a component for a link between a check and the open cannot escape,
  since no path string is ever re-resolved.
* **Regular files only.** A FIFO, socket or device is refused (``allow_special=True`` lets
  them through); opening uses ``O_NONBLOCK``, so a FIFO never hangs the open.
* **Every read has a byte cap and streams.** A file whose size is over the cap is refused
  before a byte is read (a 2 GiB sparse file costs a ``fstat``); a file that grows while read
  is cut off at the cap and refused.
* **Text decoding is explicit**: UTF-8 unless told otherwise, strict (a bad byte is a refusal
  naming its offset).
* **Parsers are bounded before they recurse.** JSON's nesting is measured before it is parsed
  (:mod:`.safejson`); TOML's brackets outside strings and comments are counted before
  ``tomllib`` runs, and its dotted keys after (without recursion); YAML's depth is counted as
  it is composed (a document deeper than ``max_depth`` stops there), and a document with
  aliases is refused when its expansion (every alias copied out) would be more than
  ``max_bytes`` characters or deeper than ``max_depth``, or when an alias refers to itself.
* **Listing is bounded**: :meth:`Folder.walk` stops with a refusal past ``max_entries``
  entries or ``max_depth`` levels, and never follows a link into a directory.
* **Fields are typed and ranged**: :class:`Fields` reads one table of a parsed file; a number
  is finite, of the right type (a bool is no number), and within its documented range, a
  text is a string within its length; the message names the file and the field.

Layer 0: it imports only :mod:`.errors` and :mod:`.safejson`; PyYAML and ``tomllib``/``tomli``
are imported when a YAML or TOML file is read.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.safejson import JSONLimitError, check_bounds

__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_LINKS",
    "MAX_WALK_DEPTH",
    "Entry",
    "Fields",
    "Folder",
    "UntrustedInputError",
    "load_json",
    "load_toml",
    "load_yaml",
    "open_regular",
    "parse_json",
    "parse_toml",
    "parse_yaml",
    "read_bytes",
    "read_text",
    "value_depth",
]

MAX_FILE_BYTES = 16 << 20
"""The default byte cap of one read (16 MiB): far above any task file, config or data file
this package reads whole; readers of larger files pass their own cap."""
MAX_DEPTH = 64
"""The default nesting bound of a parsed file (JSON, YAML, TOML): far above any of ours."""
MAX_ENTRIES = 100_000
"""The default bound on the entries one :meth:`Folder.walk` visits."""
MAX_WALK_DEPTH = 32
"""The default bound on the folder levels one :meth:`Folder.walk` descends."""
MAX_LINKS = 40
"""The most symbolic links one path may go through (Linux's own ``MAXSYMLINKS``)."""

_CHUNK = 1 << 20
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


# ------------------------------------------------------------------------------ small helpers
def _show(value: object, limit: int = 60) -> str:
    """A short, bounded description of a value for a message (never a deep ``repr``)."""
    if isinstance(value, Mapping):
        return f"a table of {len(value)} entries"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    text = repr(value) if not isinstance(value, str) or len(value) <= limit else repr(value[:limit])
    return text if len(text) <= limit + 5 else text[:limit] + "...'"


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def value_depth(value: object) -> int:
    """How deep lists and dicts nest in ``value`` (a scalar: 0), found without recursion, so a
    value nested 100,000 deep is measured, not a ``RecursionError``."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def _check_depth(value: object, max_depth: int, where: str) -> None:
    depth = value_depth(value)
    if depth > max_depth:
        raise UntrustedInputError(f"{where}: nested {depth} deep, over the limit of {max_depth}")


def _read_fd(fd: int, max_bytes: int, where: str) -> bytes:
    """At most ``max_bytes`` from an open regular file, refused (not cut) when there is more."""
    size = os.fstat(fd).st_size
    if size > max_bytes:
        raise UntrustedInputError(
            f"{where}: {size:,} bytes, over the limit of {max_bytes:,} for this file"
        )
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise UntrustedInputError(
                f"{where}: over the limit of {max_bytes:,} bytes for this file (it grew while read)"
            )
    return b"".join(chunks)


def _decode(data: bytes, encoding: str, where: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UntrustedInputError(
            f"{where}: not {encoding} text (byte {exc.start:,}: {exc.reason})"
        ) from None


def _check_regular(fd: int, where: str, allow_special: bool) -> None:
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or (allow_special and not stat.S_ISDIR(mode)):
        return
    if stat.S_ISDIR(mode):
        raise UntrustedInputError(f"{where}: a directory, not a regular file")
    raise UntrustedInputError(f"{where}: a {_kind(mode)}, not a regular file")


# ------------------------------------------------------------------------------ one named file
def open_regular(
    path: str | os.PathLike[str], flags: int = os.O_RDONLY, *, allow_special: bool = False
) -> int:
    """A descriptor of ``path`` (which the user named: a link there is followed) when it is a
    regular file; a FIFO, socket, device or directory is refused without blocking
    (``O_NONBLOCK`` while opening, cleared after). ``flags`` may add ``O_WRONLY``/``O_APPEND``
    (not ``O_CREAT``/``O_TRUNC``: this opens what exists)."""
    where = os.fspath(path)
    try:
        fd = os.open(path, flags | _O_NONBLOCK | _O_CLOEXEC)
    except FileNotFoundError:
        raise UntrustedInputError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise UntrustedInputError(f"{where}: a directory, not a regular file") from None
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket, or a FIFO with no reader
            raise UntrustedInputError(f"{where}: not a regular file ({exc.strerror})") from None
        raise UntrustedInputError(f"{where}: cannot be opened ({exc.strerror})") from None
    try:
        _check_regular(fd, where, allow_special)
        if _O_NONBLOCK and not allow_special:
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, allow_special: bool = False
) -> bytes:
    """The bytes of a file the user named (a config, a data file), at most ``max_bytes``."""
    fd = open_regular(path, allow_special=allow_special)
    try:
        return _read_fd(fd, max_bytes, os.fspath(path))
    finally:
        os.close(fd)


def read_text(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, encoding: str = "utf-8"
) -> str:
    """The text of a file the user named, at most ``max_bytes`` bytes, decoded strictly."""
    return _decode(read_bytes(path, max_bytes=max_bytes), encoding, os.fspath(path))


def load_json(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """A JSON file the user named, within ``max_bytes`` and ``max_depth``."""
    where = os.fspath(path)
    return parse_json(read_text(path, max_bytes=max_bytes), max_depth=max_depth, where=where)


def load_yaml(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """A YAML file the user named (one document), within ``max_bytes`` and ``max_depth``."""
    where = os.fspath(path)
    text = read_text(path, max_bytes=max_bytes)
    return parse_yaml(text, max_depth=max_depth, max_expanded=max_bytes, where=where)


def load_toml(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH
) -> dict[str, Any]:
    """A TOML file the user named, within ``max_bytes`` and ``max_depth``."""
    where = os.fspath(path)
    return parse_toml(read_text(path, max_bytes=max_bytes), max_depth=max_depth, where=where)


# ------------------------------------------------------------------------------ parsers
def parse_json(text: str | bytes, *, max_depth: int = MAX_DEPTH, where: str = "<json>") -> Any:
    """JSON text (already within its byte cap), its nesting measured before it is parsed."""
    try:
        if isinstance(text, bytes | bytearray):
            text = _decode(bytes(text), "utf-8", where)
        check_bounds(text, max_bytes=len(text), max_depth=max_depth)
        import json

        return json.loads(text)
    except JSONLimitError as exc:
        raise UntrustedInputError(f"{where}: {exc}") from None
    except ValueError as exc:
        if isinstance(exc, UntrustedInputError):
            raise
        raise UntrustedInputError(f"{where}: not valid JSON ({exc})") from None


# TOML text that cannot hold a bracket: strings (basic, literal, multi-line) and comments,
# matched leftmost-first, so a '#' or '[' inside a string is part of the string
_TOML_SKIP = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*',
    re.DOTALL,
)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)


def _bracket_depth(text: str) -> int:
    brackets = _NOT_BRACKET.sub("", text)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where(np.isin(codes, _OPEN), 1, -1).astype(np.int64)
    return int(np.cumsum(steps).max(initial=0))


def parse_toml(text: str, *, max_depth: int = MAX_DEPTH, where: str = "<toml>") -> dict[str, Any]:
    """TOML text: arrays and inline tables nested deeper than ``max_depth`` are refused before
    ``tomllib`` runs (it recurses on them), dotted keys deeper than that after."""
    if text.count("[") + text.count("{") > max_depth:
        depth = _bracket_depth(_TOML_SKIP.sub("", text))
        if depth > max_depth:
            raise UntrustedInputError(
                f"{where}: nested {depth} deep, over the limit of {max_depth}"
            )
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as exc:
            raise ImportError(
                "reading TOML on Python 3.10 needs tomli: pip install 'multiturn-envs[terminal]'"
            ) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UntrustedInputError(f"{where}: not valid TOML ({exc})") from None
    except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits, say
        raise UntrustedInputError(f"{where}: not readable TOML ({exc})") from None
    _check_depth(data, max_depth, where)
    return dict(data)


def _yaml_loader(max_depth: int, libyaml: bool = True) -> Any:
    """A safe loader class that counts its depth while composing (PyYAML composes
    recursively: the count stops a deep document long before Python's recursion limit) and
    notes whether the document used an alias.

    Its events come from libyaml's parser when PyYAML has it (``yaml._yaml.CParser``: about
    ten times the pure-Python parser's speed, and iterative), composed by PyYAML's own
    Python composer, so that the count above sees every node; else from the Python parser.
    Either way the tags are the safe ones (``SafeConstructor``). ``libyaml`` false: the
    Python parser (what a PyYAML without libyaml uses; the tests run both)."""
    import yaml
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.parser import Parser as Events
    from yaml.reader import Reader
    from yaml.resolver import Resolver
    from yaml.scanner import Scanner

    class PythonParser(Reader, Scanner, Events):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Events.__init__(self)

    Parser: Any = PythonParser
    if libyaml:
        with contextlib.suppress(ImportError):  # PyYAML built without libyaml
            from yaml._yaml import CParser

            Parser = CParser

    class BoundedLoader(Composer, SafeConstructor, Resolver, Parser):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            Parser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self.depth = 0
            self.aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                return super().compose_node(parent, index)
            self.depth += 1
            try:
                if self.depth > max_depth:
                    mark = self.peek_event().start_mark
                    raise UntrustedInputError(
                        f"nested over the limit of {max_depth} (line {mark.line + 1})"
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def _yaml_expansion(root: Any, max_expanded: int, max_depth: int) -> None:
    """Refuse a node graph whose expansion (each alias copied out) is over ``max_expanded``
    characters (a scalar counts its length plus one, a collection one) or ``max_depth``
    levels, or that holds a cycle; iterative, each shared node measured once."""
    import yaml

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.ScalarNode):
            size[key], depth[key] = len(str(node.value)) + 1, 0
            continue
        children = (
            [n for pair in node.value for n in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
        )
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > max_expanded:
                raise UntrustedInputError(f"its aliases expand to over {max_expanded:,} characters")
            if depth[key] > max_depth:
                raise UntrustedInputError(f"its aliases nest it over {max_depth} deep")
            continue
        if key in size:
            continue
        if key in on_path:
            raise UntrustedInputError("an alias refers to a node that holds it (a cycle)")
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise UntrustedInputError("an alias refers to a node that holds it (a cycle)")
            if id(child) not in size:
                stack.append((child, False))


def parse_yaml(
    text: str,
    *,
    max_depth: int = MAX_DEPTH,
    max_expanded: int = MAX_FILE_BYTES,
    where: str = "<yaml>",
    libyaml: bool = True,
) -> Any:
    """One YAML document (safe tags only): deeper than ``max_depth`` is refused as it is
    composed; a document with aliases is refused when they expand past ``max_expanded``
    characters or ``max_depth`` levels, or form a cycle (see the module docstring).
    ``libyaml`` false: parse with PyYAML's Python parser even where libyaml is there."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml ships with the [terminal] extra
        raise ImportError(
            "reading YAML needs PyYAML: pip install 'multiturn-envs[terminal]'"
        ) from exc
    loader = _yaml_loader(max_depth, libyaml)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if loader.aliases:
            _yaml_expansion(node, max_expanded, max_depth)
        return loader.construct_document(node)
    except UntrustedInputError as exc:
        raise UntrustedInputError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own bound (1,000 levels)
            raise UntrustedInputError(f"{where}: nested over the limit of {max_depth}") from None
        raise UntrustedInputError(f"{where}: not valid YAML ({exc})") from None
    except (ValueError, TypeError, RecursionError) as exc:  # a constructor's own error
        raise UntrustedInputError(f"{where}: not readable YAML ({exc})") from None
    finally:
        loader.dispose()


# ------------------------------------------------------------------------------ a folder
@dataclass(frozen=True)
class Entry:
    """One entry of :meth:`Folder.walk`: its path relative to the folder walked (POSIX
    separators), its kind (``file``, ``dir``, ``link``, ``FIFO``, ``socket``, ``device``) and,
    for a file, its size."""

    path: str
    kind: str
    size: int = 0


class Folder:
    """A folder of untrusted files: every path read through it stays beneath ``root``.

    ``root`` itself is resolved once (it is the caller's: a link there is followed) and must be
    a directory. ``where`` is how messages name the folder (default: the root's path). See the
    module docstring for the rules.
    """

    def __init__(
        self, root: str | os.PathLike[str], *, where: str | None = None, allow_special: bool = False
    ) -> None:
        self.root = Path(os.path.abspath(root))
        if not os.path.isdir(self.root):
            raise UntrustedInputError(f"{os.fspath(root)}: not a directory")
        self.where = where if where is not None else str(self.root)
        self.allow_special = allow_special
        self._parent: tuple[Folder, str] | None = None

    def __repr__(self) -> str:
        return f"Folder({str(self.root)!r})"

    def name(self, rel: str | os.PathLike[str]) -> str:
        """How messages name ``rel`` (the folder's name, then the relative path)."""
        text = os.fspath(rel).strip("/")
        return f"{self.where}/{text}" if text else self.where

    def sub(self, rel: str | os.PathLike[str]) -> Folder:
        """The folder ``rel`` beneath this one (it must stay beneath the root), as a root of
        its own. It is reached from this folder's root each time, through the real entries
        found now: replacing one of them by a link later refuses every read."""
        fd, names = self._resolve(rel, directory=True)
        os.close(fd)
        folder = Folder.__new__(Folder)
        folder.root = self.root.joinpath(*names)
        folder.where = self.name(rel)
        folder.allow_special = self.allow_special
        folder._parent = (self, "/".join(names))
        return folder

    # ---------------------------------------------------------------- resolution
    def _components(self, rel: str | os.PathLike[str]) -> list[str]:
        text = os.fspath(rel)
        if "\0" in text:
            raise UntrustedInputError(f"{self.where}: a path with a NUL byte")
        if text.startswith("/"):
            raise UntrustedInputError(f"{self.name(text)}: an absolute path leaves the folder")
        return [part for part in text.split("/") if part not in ("", ".")]

    def _open(self, rel: str | os.PathLike[str], *, directory: bool = False) -> int:
        return self._resolve(rel, directory=directory)[0]

    def _resolve(
        self, rel: str | os.PathLike[str], *, directory: bool = False, links: bool = True
    ) -> tuple[int, list[str]]:
        """A descriptor of ``rel`` resolved beneath the root (see the module docstring), and
        the names of the real entries from the root to it. The last component is opened
        ``O_NONBLOCK`` (a FIFO does not block); a directory when ``directory``. Missing:
        ``FileNotFoundError``/``NotADirectoryError``; the root itself as a file:
        ``IsADirectoryError``. ``links`` false: a link anywhere on the way is refused."""
        todo = self._components(rel)
        where = self.name(rel)
        stack = [self._root_fd()]
        names: list[str] = []
        hops = 0
        try:
            while todo:
                name = todo.pop(0)
                if name == "..":
                    if not names:
                        how = "a link that leaves" if hops else "leaves"
                        raise UntrustedInputError(f"{where}: {how} the folder ({self.where})")
                    os.close(stack.pop())
                    names.pop()
                    continue
                flags = os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK
                if directory or todo:
                    flags |= _O_DIRECTORY
                try:
                    fd = os.open(name, flags, dir_fd=stack[-1])
                except OSError as exc:
                    target = self._link(name, stack[-1])
                    if target is None:
                        if exc.errno == errno.ENOENT:
                            raise FileNotFoundError(errno.ENOENT, "no such file", where) from None
                        if exc.errno == errno.ENOTDIR:
                            raise NotADirectoryError(
                                errno.ENOTDIR, "not a directory", where
                            ) from None
                        raise UntrustedInputError(
                            f"{where}: cannot be opened ({exc.strerror})"
                        ) from None
                    if not links:
                        raise UntrustedInputError(
                            f"{where}: replaced by a link since it was checked"
                        ) from None
                    hops += 1
                    if hops > MAX_LINKS:
                        raise UntrustedInputError(
                            f"{where}: goes through more than {MAX_LINKS} links"
                        ) from None
                    if target.startswith("/"):
                        raise UntrustedInputError(
                            f"{where}: a link to {target[:200]}, outside the folder ({self.where})"
                        ) from None
                    todo[:0] = [p for p in target.split("/") if p not in ("", ".")]
                    continue
                stack.append(fd)
                names.append(name)
            if not names and not directory:
                raise IsADirectoryError(errno.EISDIR, "a directory", where)
            return stack.pop(), names
        finally:
            for fd in stack:
                os.close(fd)

    @staticmethod
    def _link(name: str, dir_fd: int) -> str | None:
        try:
            return os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return None

    def stat(self, rel: str | os.PathLike[str]) -> os.stat_result | None:
        """What ``rel`` is once resolved beneath the root (``None`` when it does not exist);
        a path or link leaving the folder is an :class:`UntrustedInputError`, never ``None``:
        a task must not quietly lose its ``instruction.md`` to a link."""
        try:
            fd = self._open(rel)
        except IsADirectoryError:
            return os.stat(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def exists(self, rel: str | os.PathLike[str]) -> bool:
        return self.stat(rel) is not None

    def is_file(self, rel: str | os.PathLike[str]) -> bool:
        """A regular file beneath the root (a FIFO or device is ``False``)."""
        found = self.stat(rel)
        return found is not None and stat.S_ISREG(found.st_mode)

    def is_dir(self, rel: str | os.PathLike[str]) -> bool:
        found = self.stat(rel)
        return found is not None and stat.S_ISDIR(found.st_mode)

    # ---------------------------------------------------------------- reading
    def _open_file(self, rel: str | os.PathLike[str]) -> int:
        try:
            fd = self._open(rel)
        except (FileNotFoundError, NotADirectoryError):
            raise UntrustedInputError(f"{self.name(rel)}: no such file") from None
        except IsADirectoryError:
            raise UntrustedInputError(f"{self.name(rel)}: a directory, not a file") from None
        try:
            _check_regular(fd, self.name(rel), self.allow_special)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open(self, rel: str | os.PathLike[str]) -> IO[bytes]:
        """A regular file beneath the root, opened for reading (binary): to stream a file
        that is not read whole (a hash, a tar of a build context)."""
        fd = self._open_file(rel)
        if _O_NONBLOCK:
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_NONBLOCK)
        return open(fd, "rb", closefd=True)  # the caller closes it

    def read_bytes(self, rel: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
        """The bytes of a regular file beneath the root, at most ``max_bytes`` (refused past)."""
        fd = self._open_file(rel)
        try:
            return _read_fd(fd, max_bytes, self.name(rel))
        finally:
            os.close(fd)

    def read_text(
        self,
        rel: str | os.PathLike[str],
        *,
        max_bytes: int = MAX_FILE_BYTES,
        encoding: str = "utf-8",
    ) -> str:
        """The text of a regular file beneath the root, decoded strictly."""
        return _decode(self.read_bytes(rel, max_bytes=max_bytes), encoding, self.name(rel))

    def read_json(
        self,
        rel: str | os.PathLike[str],
        *,
        max_bytes: int = MAX_FILE_BYTES,
        max_depth: int = MAX_DEPTH,
    ) -> Any:
        text = self.read_text(rel, max_bytes=max_bytes)
        return parse_json(text, max_depth=max_depth, where=self.name(rel))

    def read_yaml(
        self,
        rel: str | os.PathLike[str],
        *,
        max_bytes: int = MAX_FILE_BYTES,
        max_depth: int = MAX_DEPTH,
    ) -> Any:
        text = self.read_text(rel, max_bytes=max_bytes)
        return parse_yaml(text, max_depth=max_depth, max_expanded=max_bytes, where=self.name(rel))

    def read_toml(
        self,
        rel: str | os.PathLike[str],
        *,
        max_bytes: int = MAX_FILE_BYTES,
        max_depth: int = MAX_DEPTH,
    ) -> dict[str, Any]:
        text = self.read_text(rel, max_bytes=max_bytes)
        return parse_toml(text, max_depth=max_depth, where=self.name(rel))

    # ---------------------------------------------------------------- listing
    def _walk(
        self, rel: str | os.PathLike[str], max_entries: int, max_depth: int, descend: bool
    ) -> Iterator[tuple[int, str, Entry]]:
        """``(descriptor of its folder, its name there, entry)`` for every entry under ``rel``,
        depth first in name order (a folder right before its contents), the descriptor valid
        until the next item. At most ``max_depth`` folders are open at once."""
        where = self.name(rel)
        top = self._open(rel, directory=True) if self._components(rel) else self._root_fd()
        frames: list[tuple[int, str, Iterator[str]]] = []
        seen = 0

        def enter(fd: int, prefix: str) -> None:
            nonlocal seen
            if len(frames) >= max_depth:
                os.close(fd)
                raise UntrustedInputError(f"{where}: folders nest over {max_depth} levels deep")
            try:
                names = []
                with os.scandir(fd) as listing:
                    for item in listing:
                        names.append(item.name)
                        if seen + len(names) > max_entries:
                            raise UntrustedInputError(f"{where}: over {max_entries:,} entries")
            except BaseException:
                os.close(fd)
                raise
            seen += len(names)
            frames.append((fd, prefix, iter(sorted(names))))

        try:
            enter(top, "")
            while frames:
                fd, prefix, names = frames[-1]
                name = next(names, None)
                if name is None:
                    os.close(fd)
                    frames.pop()
                    continue
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed while listed
                kind = _kind(info.st_mode)
                path = f"{prefix}{name}"
                yield fd, name, Entry(path, kind, info.st_size if kind == "file" else 0)
                if kind == "dir" and descend:
                    flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
                    try:
                        sub = os.open(name, flags, dir_fd=fd)
                    except OSError:
                        continue  # swapped for a link or removed meanwhile: not followed
                    enter(sub, f"{path}/")
        finally:
            for fd, _, _ in frames:
                os.close(fd)

    def walk(
        self,
        rel: str | os.PathLike[str] = "",
        *,
        max_entries: int = MAX_ENTRIES,
        max_depth: int = MAX_WALK_DEPTH,
        descend: bool = True,
    ) -> list[Entry]:
        """Every entry under the folder ``rel`` (not ``rel`` itself), in name order,
        directories before their contents; links are listed (``kind="link"``), never followed.
        More than ``max_entries`` entries or ``max_depth`` levels is a refusal (``descend``
        false: only ``rel``'s own entries)."""
        return [entry for _, _, entry in self._walk(rel, max_entries, max_depth, descend)]

    def stream_tree(
        self,
        rel: str | os.PathLike[str] = "",
        *,
        max_total_bytes: int,
        max_entries: int = MAX_ENTRIES,
        max_depth: int = MAX_WALK_DEPTH,
    ) -> Iterator[tuple[Entry, IO[bytes] | None]]:
        """Every entry under ``rel`` in :meth:`walk` order, each regular file with an open
        binary file to stream (valid until the next item), anything else with ``None``: to
        hash or tar a tree without holding it. A link must resolve beneath the root (it is not
        followed: :meth:`readlink` gives its target); a FIFO, socket or device is refused;
        files larger than ``max_total_bytes`` together are refused before the one that
        crosses the bound is read."""
        base = "/".join(self._components(rel))
        total = 0
        for fd, name, entry in self._walk(rel, max_entries, max_depth, True):
            full = f"{base}/{entry.path}" if base else entry.path
            if entry.kind == "link":
                self.stat(full)  # a link leaving the folder is refused
            if entry.kind != "file":
                if entry.kind not in ("dir", "link") and not self.allow_special:
                    raise UntrustedInputError(
                        f"{self.name(full)}: a {entry.kind}, not a regular file"
                    )
                yield entry, None
                continue
            flags = os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK
            try:
                handle = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                raise UntrustedInputError(
                    f"{self.name(full)}: cannot be opened ({exc.strerror})"
                ) from None
            with open(handle, "rb") as stream:
                _check_regular(handle, self.name(full), False)
                total += os.fstat(handle).st_size
                if total > max_total_bytes:
                    raise UntrustedInputError(
                        f"{self.name(rel)}: its files together are over the limit of "
                        f"{max_total_bytes:,} bytes for this folder"
                    )
                yield entry, stream

    def listdir(
        self, rel: str | os.PathLike[str] = "", *, max_entries: int = MAX_ENTRIES
    ) -> list[Entry]:
        """The entries of the folder ``rel`` itself (one level, in name order), at most
        ``max_entries``; links listed, not followed."""
        return self.walk(rel, max_entries=max_entries, max_depth=1, descend=False)

    def readlink(self, rel: str | os.PathLike[str]) -> str:
        """The target text of the link ``rel`` (its folder resolved beneath the root; the
        target itself is not followed): to copy a link as a link."""
        parts = self._components(rel)
        if not parts or parts[-1] == "..":
            raise UntrustedInputError(f"{self.name(rel)}: not a link")
        parent = "/".join(parts[:-1])
        fd = self._resolve(parent, directory=True)[0] if parent else self._root_fd()
        try:
            target = self._link(parts[-1], fd)
        finally:
            os.close(fd)
        if target is None:
            raise UntrustedInputError(f"{self.name(rel)}: not a link")
        return target

    def _root_fd(self) -> int:
        """A descriptor of the root: opened by its path (the caller's: a link there is
        followed), or, for a :meth:`sub` folder, from its parent without following links."""
        if self._parent is not None:
            parent, rel = self._parent
            return parent._resolve(rel, directory=True, links=False)[0]
        return os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)

    def check_links(
        self,
        rel: str | os.PathLike[str] = "",
        *,
        max_entries: int = MAX_ENTRIES,
        max_depth: int = MAX_WALK_DEPTH,
    ) -> list[Entry]:
        """Every entry under ``rel`` (see :meth:`walk`), once each link there is known to
        resolve beneath the root: a folder whose links lead outside is refused with the first
        such link named (what must hold before a build context is sent anywhere)."""
        base = "/".join(self._components(rel))
        entries = self.walk(rel, max_entries=max_entries, max_depth=max_depth)
        for entry in entries:
            if entry.kind == "link":
                self.stat(f"{base}/{entry.path}" if base else entry.path)
        return entries

    def read_tree(
        self,
        rel: str | os.PathLike[str],
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        max_total_bytes: int = 4 * MAX_FILE_BYTES,
        max_entries: int = MAX_ENTRIES,
        max_depth: int = MAX_WALK_DEPTH,
    ) -> dict[str, bytes]:
        """Every file under the folder ``rel`` (links resolved beneath the root), by its path
        relative to ``rel``: each at most ``max_file_bytes``, all together at most
        ``max_total_bytes``; a FIFO, socket or device there is a refusal."""
        base = "/".join(self._components(rel))
        files: dict[str, bytes] = {}
        total = 0
        tree = self.stream_tree(
            rel, max_total_bytes=max_total_bytes, max_entries=max_entries, max_depth=max_depth
        )
        for entry, stream in tree:
            full = f"{base}/{entry.path}" if base else entry.path
            cap = min(max_file_bytes, max_total_bytes - total)
            if stream is not None:
                data = _read_fd(stream.fileno(), cap, self.name(full))
            elif entry.kind == "link" and not self.is_dir(full):
                data = self.read_bytes(full, max_bytes=cap)  # a file elsewhere inside
            else:
                continue  # a folder (or a link to one inside: its files are listed there)
            total += len(data)
            files[entry.path] = data
        return files


# ------------------------------------------------------------------------------ typed fields
class Fields:
    """The typed fields of one table of an untrusted file (a parsed ``task.toml`` section, a
    config): each getter checks the type and range and names the file and field when it
    refuses. ``where`` names the file; ``prefix`` the table (``verifier.``).

    A missing field (or one set to ``None``/null) gives the default.
    """

    def __init__(self, data: object, *, where: str, prefix: str = "") -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            table = prefix.rstrip(".") or "the file"
            raise UntrustedInputError(f"{where}: {table} must be a table, not {_show(data)}")
        self.data: Mapping[str, Any] = data
        self.where = where
        self.prefix = prefix

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.data.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(str(k) for k in self.data)

    def _refuse(self, key: str, value: object, rule: str) -> UntrustedInputError:
        return UntrustedInputError(f"{self.where}: {self.prefix}{key} {rule}, not {_show(value)}")

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value (for fields with a shape of their own; check it yourself)."""
        value = self.data.get(key)
        return default if value is None else value

    def number(
        self,
        key: str,
        *,
        default: float | None,
        minimum: float,
        maximum: float,
        exclusive_minimum: bool = False,
    ) -> float | None:
        """A finite int or float within ``[minimum, maximum]`` (``(minimum, maximum]`` with
        ``exclusive_minimum``), as a float."""
        value = self.data.get(key)
        if value is None:
            return default
        low = "over" if exclusive_minimum else "at least"
        rule = f"must be a number {low} {minimum:g} and at most {maximum:g}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._refuse(key, value, rule)
        try:
            number = float(value)
        except OverflowError:
            raise self._refuse(key, value, rule) from None
        if not math.isfinite(number) or number > maximum:
            raise self._refuse(key, value, rule)
        if number < minimum or (exclusive_minimum and number == minimum):
            raise self._refuse(key, value, rule)
        return number

    def integer(self, key: str, *, default: int | None, minimum: int, maximum: int) -> int | None:
        """An int within ``[minimum, maximum]`` (a float with no fraction counts: ``2.0``)."""
        value = self.data.get(key)
        if value is None:
            return default
        rule = f"must be a whole number from {minimum:,} to {maximum:,}"
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._refuse(key, value, rule)
        if not minimum <= value <= maximum:
            raise self._refuse(key, value, rule)
        return value

    def text(
        self,
        key: str,
        *,
        default: str = "",
        max_chars: int = 10_000,
        choices: tuple[str, ...] | None = None,
        scalars: bool = False,
    ) -> str:
        """A string of at most ``max_chars`` (one of ``choices`` when given); ``scalars``
        also takes a number or bool, as its text (``user = 1000``)."""
        value = self.data.get(key)
        if value is None:
            return default
        if scalars and isinstance(value, int | float | bool):
            value = str(value).lower() if isinstance(value, bool) else str(value)
        if not isinstance(value, str):
            raise self._refuse(key, value, "must be a string")
        if len(value) > max_chars:
            raise UntrustedInputError(
                f"{self.where}: {self.prefix}{key} is {len(value):,} characters long, over the "
                f"limit of {max_chars:,}"
            )
        if choices is not None and value not in choices:
            raise self._refuse(key, value, f"must be one of {', '.join(choices)}")
        return value

    def flag(self, key: str, *, default: bool = False) -> bool:
        """A bool (``true``/``false``)."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._refuse(key, value, "must be true or false")
        return value

    def table(self, key: str) -> Fields:
        """The sub-table ``key`` (missing: an empty one)."""
        return Fields(self.data.get(key), where=self.where, prefix=f"{self.prefix}{key}.")

    def text_map(
        self, key: str, *, max_items: int = 1_000, max_chars: int = 100_000
    ) -> dict[str, str]:
        """A table of strings (an ``env`` table): scalar values taken as their text."""
        table = self.table(key)
        if len(table.data) > max_items:
            raise UntrustedInputError(
                f"{self.where}: {self.prefix}{key} has {len(table.data):,} entries, over the "
                f"limit of {max_items:,}"
            )
        out: dict[str, str] = {}
        for name in table:
            text = table.text(name, max_chars=max_chars, scalars=True)
            if len(name) > max_chars:
                raise UntrustedInputError(f"{self.where}: {self.prefix}{key} has a name too long")
            out[name] = text
        return out

    def text_list(self, key: str, *, max_items: int = 1_000, max_chars: int = 10_000) -> list[str]:
        """A list of strings (a string alone counts as a list of one)."""
        value = self.data.get(key)
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise self._refuse(key, value, "must be a list of strings")
        if len(value) > max_items:
            raise self._refuse(key, value, f"must have at most {max_items:,} items")
        for item in value:
            if not isinstance(item, str) or len(item) > max_chars:
                raise self._refuse(
                    key, item, f"must hold strings of at most {max_chars:,} characters"
                )
        return [str(v) for v in value]
