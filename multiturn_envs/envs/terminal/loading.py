"""What the task loaders share: the result of loading a folder of tasks (never an empty list in
silence, never one bad task stopping the rest), and reading a reference solution into turns.
"""

from __future__ import annotations

import base64
import re
import shlex
import textwrap
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from multiturn_envs.envs.terminal.tasks import TerminalTask

NEXT_TURN = "# --- next turn ---"
"""A line of a solution script that separates two turns (a multiturn-envs convention: as a
script the turns simply run in order)."""


DOWNLOADS = re.compile(
    r"\b(curl|wget|pip3? install|uv (add|pip|sync)|uvx|apt(-get)? (-y )?install|git clone|"
    r"urlretrieve|urlopen|requests\.get|npm install|go get|cargo install|opam install)\b"
)
"""What in a reference solution may need the network (a note, not a verdict: the image may
have what it installs)."""


class TaskUnavailable(RuntimeError):
    """One task folder cannot run here; the message says why (and what to do). ``cause``: one
    word for reports: ``base`` (an image that cannot be pulled), ``network`` (a build step
    that downloads), ``package``, ``command``, ``file``, ``step`` (a build step's own
    error), ``timeout``, ``services`` (several containers), ``gpu``, ``env`` (a host variable
    not given), ``format`` (a malformed folder, a format this env does not run)."""

    def __init__(self, message: str, cause: str = "format", log: str = "") -> None:
        super().__init__(message)
        self.cause = cause
        self.log = log


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


class LoadedTasks(list[TerminalTask]):
    """The tasks loaded from a folder, ``problems``: task folder name -> why it was left out
    (it does not run here), and ``causes``: the same folders -> the cause in one word
    (:class:`TaskUnavailable`'s, ``format`` for a malformed folder, ``file`` for one that
    cannot be read)."""

    def __init__(
        self,
        tasks: Iterable[TerminalTask] = (),
        problems: dict[str, str] | None = None,
        causes: dict[str, str] | None = None,
    ):
        super().__init__(tasks)
        self.problems: dict[str, str] = dict(problems or {})
        self.causes: dict[str, str] = dict(causes or {})


def load_all(
    root: str | Path, marker: str, load_one: Callable[[Path], TerminalTask], what: str
) -> LoadedTasks:
    """Every task folder under ``root`` (a folder holding ``marker``), in name order; a folder
    that fails is left out with its reason (a warning each) and an empty result raises
    :class:`NoTasksLoaded` with every reason."""
    base = Path(root)
    if not base.is_dir():
        raise NoTasksLoaded(f"{base} is not a directory")
    folders = (
        [base] if (base / marker).is_file() else sorted(p.parent for p in base.glob(f"*/{marker}"))
    )
    if not folders:
        there = ", ".join(sorted(p.name for p in base.iterdir() if p.is_dir())[:10]) or "none"
        raise NoTasksLoaded(
            f"no {what} task under {base}: a task is a folder with a {marker} (the folders "
            f"there: {there})"
        )
    loaded = LoadedTasks()
    for folder in folders:
        try:
            loaded.append(load_one(folder))
        except (TaskUnavailable, ValueError, OSError) as exc:
            loaded.problems[folder.name] = str(exc)
            loaded.causes[folder.name] = (
                exc.cause
                if isinstance(exc, TaskUnavailable)
                else "format"
                if isinstance(exc, ValueError)
                else "file"
            )
            warnings.warn(f"{what} task {folder.name} left out: {exc}", stacklevel=3)
    if not loaded:
        reasons = "; ".join(f"{name}: {why}" for name, why in loaded.problems.items())
        raise NoTasksLoaded(
            f"no {what} task under {base} can run here: {reasons}", loaded.problems, loaded.causes
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
    """``easy``/``medium``/``hard`` (``unknown`` and the like count as ``medium``)."""
    text = str(value or "medium").strip().lower()
    return text if text in ("easy", "medium", "hard") else "medium"


def solution_upload(files: Mapping[str, bytes]) -> str:
    """A shell command (one turn) that writes ``files`` (path -> bytes, relative) into
    :data:`~.tasks.SOLUTION_DIR` as Harbor uploads a task's ``solution/`` folder before its
    oracle runs ``solve.sh``; a file whose name ends in ``.sh`` is made executable."""
    from multiturn_envs.envs.terminal.tasks import SOLUTION_DIR

    lines = [f"mkdir -p {SOLUTION_DIR}"]
    for path in sorted(files):
        target = shlex.quote(f"{SOLUTION_DIR}/{path}")
        data = base64.b64encode(files[path]).decode("ascii")
        lines.append(f'mkdir -p -- "$(dirname -- {target})"')
        lines.append(f"base64 -d > {target} <<'MTE_SOLUTION_FILE'")
        lines += textwrap.wrap(data, 76) or [""]
        lines.append("MTE_SOLUTION_FILE")
        if path.endswith(".sh"):
            lines.append(f"chmod +x {target}")
    return "\n".join(lines)
