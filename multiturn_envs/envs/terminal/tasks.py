"""Terminal tasks: what the agent is asked, the files it starts with, the hidden checks, and a
reference solution.

A task's starting ``/app`` is ``files`` plus whatever ``setup`` (bash, run once as the agent's
uid in ``/app`` before the first episode) makes; the env caches the resulting tree and restores
it for every later episode. ``solution`` is a list of commands, one per turn, that takes the
starting state to one where every check passes; the oracle's ``expert_action`` follows it.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from multiturn_envs.envs.terminal.checker import Check

DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class TerminalTask:
    """One task (see the module docstring).

    Attributes:
        task_id: unique id.
        instruction: what the agent is told (the first observation).
        checks: the hidden checks; success = all pass, ``step_score`` = share passing.
        solution: the reference solution, one shell command per turn.
        files: ``/app``-relative path -> text content of the starting files.
        setup: bash run once in ``/app`` as the agent's uid to finish the starting state.
        category, difficulty: for selection and reports.
        image: the container image (``None``: the terminal image).
        support_files: path -> bytes given to the checks under ``$TEST_DIR`` (Terminal-Bench's
            ``tests/``); never visible to the agent.
        score_from_pytest: the checks print pytest's ``-rA`` summary; ``step_score`` counts
            its PASSED/FAILED lines instead of the checks (Terminal-Bench tasks).
        command_timeout_s: the per-command limit (``None``: the env's).
        app_from_image: the starting ``/app`` is the image's own ``/app`` (Terminal-Bench
            images ``COPY`` their files there; the env's tmpfs ``/app`` hides it otherwise).
    """

    task_id: str
    instruction: str
    checks: tuple[Check, ...]
    solution: tuple[str, ...]
    files: Mapping[str, str] = field(default_factory=dict)
    setup: str = ""
    category: str = "general"
    difficulty: str = "easy"
    image: str | None = None
    support_files: Mapping[str, bytes] = field(default_factory=dict)
    score_from_pytest: bool = False
    command_timeout_s: float | None = None
    app_from_image: bool = False

    def __post_init__(self) -> None:
        if not self.task_id or not self.instruction.strip():
            raise ValueError("a terminal task needs an id and an instruction")
        if not self.checks:
            raise ValueError(f"task {self.task_id}: no checks")
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"task {self.task_id}: difficulty must be one of {DIFFICULTIES}")
        for path in self.files:
            if path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"task {self.task_id}: file path {path!r} leaves /app")


def files_tar(files: Mapping[str, str | bytes], uid: int = 65534, mode: int = 0o644) -> bytes:
    """A tar of ``files`` (relative paths), owned by ``uid``, for ``put_archive``."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(files):
            parts = path.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                if folder not in dirs:
                    dirs.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, uid
                    tar.addfile(info)
            content = files[path]
            data = content.encode("utf-8") if isinstance(content, str) else content
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.uid, info.gid = len(data), mode, uid, uid
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def strip_top(archive: bytes) -> bytes:
    """A ``get_archive('/app')`` tar (members ``app/...``) re-rooted for ``put_archive('/app')``."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive), mode="r") as src,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in src:
            _, _, rest = member.name.partition("/")
            if not rest:  # the top directory itself
                continue
            member.name = rest
            if member.islnk():  # hard links name their target by its archive path
                member.linkname = member.linkname.partition("/")[2]
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
    return out.getvalue()


def select_tasks(
    tasks: Sequence[TerminalTask],
    categories: Sequence[str] | None = None,
    difficulties: Sequence[str] | None = None,
) -> list[TerminalTask]:
    """Tasks of the given categories and difficulties (``None``: all)."""
    return [
        t
        for t in tasks
        if (categories is None or t.category in categories)
        and (difficulties is None or t.difficulty in difficulties)
    ]
