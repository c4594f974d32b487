"""What the task loaders share: the bounds of a task folder (a folder someone else made, read
through :mod:`multiturn_envs.untrusted`), the result of loading a folder of tasks (never an
empty list in silence, never one bad task hiding the rest: each refused task is a row with its
reason), and reading a reference solution into turns.
"""

from __future__ import annotations

import base64
import re
import shlex
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from multiturn_envs.envs.terminal.parsing import MAX_COMMAND_CHARS
from multiturn_envs.envs.terminal.tasks import TerminalTask
from multiturn_envs.errors import TaskUnavailable, UntrustedInputError
from multiturn_envs.sandbox.task_images import MAX_CONTEXT_DEPTH, MAX_CONTEXT_ENTRIES
from multiturn_envs.untrusted import Folder

# The bounds of a task folder (docs/security.md lists them): far above any real task, far
# below what would cost memory or time. Each reader of a task folder takes them from here.
MAX_META_BYTES = 1 << 20
"""``task.yaml``, ``task.toml``, ``docker-compose.yaml``, ``solution.yaml``: 1 MiB each."""
MAX_INSTRUCTION_BYTES = 1 << 20
"""``instruction.md`` (or ``task.yaml``'s ``instruction``): 1 MiB, about what the env reads of
one reply (a longer first observation would crowd out the whole history)."""
MAX_SCRIPT_BYTES = 1 << 20
"""A reference solution, a Dockerfile: 1 MiB each."""
MAX_TEST_FILE_BYTES = 16 << 20
"""One file of ``tests/`` (they are held in memory and sent into each check's container)."""
MAX_TESTS_BYTES = 64 << 20
"""All files of ``tests/`` together."""
MAX_TASK_ENTRIES = MAX_CONTEXT_ENTRIES
"""Entries of a ``tests/`` folder or a build context (the build context's bound:
:mod:`multiturn_envs.sandbox.task_images`)."""
MAX_TASK_DEPTH = MAX_CONTEXT_DEPTH
"""Folder levels under ``tests/`` or a build context."""
MAX_TASKS = 100_000
"""Task folders under one root."""
MAX_TIMEOUT_S = 86_400.0
"""A task's timeouts (``max_test_timeout_sec``, ``timeout_sec``): more than 0, at most a day."""
MAX_CPUS = 1024.0
MAX_FIELD_CHARS = 10_000
"""A short text field (a category, a user, a working directory, an image name)."""
IMAGE_NAME = r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,499}"
"""An image reference a task may name (``registry/name:tag@sha256:...``): it never starts with
``-``, so it cannot be read as an option of the ``docker`` command it is passed to."""


def task_folder(path: str | Path) -> Folder:
    """A task folder as a :class:`~multiturn_envs.untrusted.Folder`: every file of it is read
    beneath it (no link out, no FIFO, byte caps)."""
    return Folder(path, allow_special=False)


def refusal_cause(exc: BaseException) -> str:
    """The one word of a loader's problem row: the task's own ``cause`` when it cannot run
    here (``network``, ``base``, ...), ``refused`` for a malformed or hostile folder (a user's
    error), ``error`` for anything else (a bug: the reason names the exception)."""
    if isinstance(exc, TaskUnavailable):
        return exc.cause
    if isinstance(exc, ValueError | OSError):
        return "refused"
    return "error"


NEXT_TURN = "# --- next turn ---"
"""A line of a solution script that separates two turns (a multiturn-envs convention: as a
script the turns simply run in order)."""


DOWNLOADS = re.compile(
    r"\b(curl|wget|pip3? install|uv (add|pip|sync)|uvx|apt(-get)? (-y )?install|git clone|"
    r"urlretrieve|urlopen|requests\.get|npm install|go get|cargo install|opam install)\b"
)
"""What in a reference solution may need the network (a note, not a verdict: the image may
have what it installs)."""


class LoadedTasks(list[TerminalTask]):
    """The tasks loaded from a folder, and one row per task left out: ``problems`` (task
    folder name -> why) and ``causes`` (task folder name -> one word: see
    :func:`refusal_cause`)."""

    def __init__(
        self,
        tasks: Iterable[TerminalTask] = (),
        problems: dict[str, str] | None = None,
        causes: dict[str, str] | None = None,
    ):
        super().__init__(tasks)
        self.problems: dict[str, str] = dict(problems or {})
        self.causes: dict[str, str] = dict(causes or {})


class NoTasksLoaded(ValueError):
    """A folder of tasks gave no task that can run here; the message lists each one's reason,
    ``problems`` and ``causes`` hold them per task folder (as :class:`LoadedTasks`; empty when
    the folder holds no task at all)."""

    def __init__(
        self,
        message: str,
        problems: dict[str, str] | None = None,
        causes: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.problems: dict[str, str] = dict(problems or {})
        self.causes: dict[str, str] = dict(causes or {})


def load_all(
    root: str | Path, marker: str, load_one: Callable[[Path], TerminalTask], what: str
) -> LoadedTasks:
    """Every task folder under ``root`` (a folder holding ``marker``), in name order; a folder
    that fails, for whatever reason, is a row with its reason (a warning each) and never stops
    the others; an empty result raises :class:`NoTasksLoaded` with every reason.

    ``root`` is read as untrusted too: a task folder that is a link leaving ``root`` is a row
    of its own, and ``root`` may hold at most :data:`MAX_TASKS` entries."""
    try:
        base = task_folder(root)
        if base.is_file(marker):
            names = [""]
        else:
            names = [
                e.path for e in base.listdir(max_entries=MAX_TASKS) if e.kind in ("dir", "link")
            ]
    except UntrustedInputError as exc:
        raise NoTasksLoaded(str(exc)) from None
    loaded = LoadedTasks()
    candidates = []
    for name in names:
        try:
            if not name or base.is_file(f"{name}/{marker}"):
                candidates.append(name)
        except (UntrustedInputError, OSError) as exc:
            loaded.problems[name] = str(exc)
            loaded.causes[name] = "refused"
    if not candidates and not loaded.problems:
        there = ", ".join(n for n in names[:10]) or "none"
        raise NoTasksLoaded(
            f"no {what} task under {root}: a task is a folder with a {marker} (the folders "
            f"there: {there})"
        )
    for name in candidates:
        folder = base.root / name if name else base.root
        try:
            loaded.append(load_one(folder))
        except Exception as exc:  # one bad task never hides the others: a row with its reason
            cause = refusal_cause(exc)
            reason = str(exc) if cause != "error" else f"{type(exc).__name__}: {exc}"
            loaded.problems[folder.name] = reason
            loaded.causes[folder.name] = cause
    for name, reason in loaded.problems.items():
        warnings.warn(f"{what} task {name} left out: {reason}", stacklevel=3)
    if not loaded:
        reasons = "; ".join(f"{name}: {why}" for name, why in loaded.problems.items())
        raise NoTasksLoaded(
            f"no {what} task under {root} can run here: {reasons}", loaded.problems, loaded.causes
        )
    return loaded


def solution_turns(script: str) -> tuple[str, ...]:
    """A solution script as turns: split at :data:`NEXT_TURN` lines, the leading shebang and
    comment lines of the script dropped, blank lines around each turn dropped."""
    turns = []
    for i, chunk in enumerate(
        re.split(rf"^[ \t]*{re.escape(NEXT_TURN)}[ \t]*$", script, flags=re.M)
    ):
        lines = chunk.split("\n")
        if i == 0:
            while lines and (lines[0].startswith("#") or not lines[0].strip()):
                lines.pop(0)
        text = "\n".join(lines).strip("\n")
        if text.strip():
            turns.append(text)
    return tuple(turns)


def difficulty_of(value: object) -> str:
    """``easy``/``medium``/``hard`` (``unknown``, a number, anything else counts as
    ``medium``)."""
    text = value.strip().lower() if isinstance(value, str) else ""
    return text if text in ("easy", "medium", "hard") else "medium"


def solution_upload(
    files: Mapping[str, bytes], max_chars: int = MAX_COMMAND_CHARS
) -> tuple[str, ...]:
    """Shell commands (turns, each at most ``max_chars`` characters: the longest command the
    env runs) that write ``files`` (path -> bytes, relative) into :data:`~.tasks.SOLUTION_DIR`
    as Harbor uploads a task's ``solution/`` folder before its oracle runs ``solve.sh``; a file
    whose name ends in ``.sh`` is made executable. Each file travels as base64 in pieces
    appended one after another, so a file of any size takes as many turns as it needs rather
    than one command the env would refuse."""
    from multiturn_envs.envs.terminal.tasks import SOLUTION_DIR

    lines = [f"mkdir -p {SOLUTION_DIR}"]
    for path in sorted(files):
        target = shlex.quote(f"{SOLUTION_DIR}/{path}")
        lines.append(f'mkdir -p -- "$(dirname -- {target})" && : > {target}')
        append = f"printf %s  | base64 -d >> {target}"
        per_line = (max_chars - len(append) - 1) // 4 * 3  # raw bytes: whole base64 groups
        if per_line <= 0:
            raise ValueError(f"solution/{path}: a name too long to upload in one command")
        data = files[path]
        for at in range(0, len(data), per_line):
            piece = base64.b64encode(data[at : at + per_line]).decode("ascii")
            lines.append(f"printf %s {piece} | base64 -d >> {target}")
        if path.endswith(".sh"):
            lines.append(f"chmod +x {target}")
    turns: list[str] = []
    for line in lines:  # as many lines a turn as fit
        if turns and len(turns[-1]) + 1 + len(line) <= max_chars:
            turns[-1] += "\n" + line
        else:
            turns.append(line)
    return tuple(turns)


def script_solution(
    name: str, script: str, files: Mapping[str, bytes]
) -> tuple[tuple[str, ...], dict[str, bytes], list[str]]:
    """A reference solution script as the turns that run it, with the files those turns
    upload first (``files``: the folder's other solution files) and a note.

    A script whose every turn fits one command is typed turn by turn, as an agent would. One
    with a turn longer than :data:`~.parsing.MAX_COMMAND_CHARS` (a Terminal-Bench 2.0
    ``solve.sh`` may hold a 25 KB program in a here-document) is uploaded with the other
    files and run from :data:`~.tasks.SOLUTION_DIR` as ``bash``, which is how Harbor's oracle
    runs every ``solve.sh``; typed, the env would refuse it and the reference would fail."""
    from multiturn_envs.envs.terminal.tasks import SOLUTION_DIR

    turns = solution_turns(script)
    uploads = dict(files)
    notes: list[str] = []
    if any(len(turn) > MAX_COMMAND_CHARS for turn in turns):
        uploads[name] = script.encode("utf-8")
        turns = (f"bash {SOLUTION_DIR}/{shlex.quote(name)}",)
        notes.append(
            f"{name} has a command longer than {MAX_COMMAND_CHARS:,} characters: the reference "
            f"solution runs it from {SOLUTION_DIR} as a script, as Harbor's oracle does"
        )
    if uploads:
        turns = (*solution_upload(uploads), *turns)
    return turns, uploads, notes
