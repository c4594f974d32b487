"""Terminal tasks: what the agent is asked, where it works, the hidden tests, and a reference
solution.

A task runs in a container of its ``image`` (default: the terminal image). Its starting state
is the image's content of the ``writable`` directories (each a size-capped tmpfs volume in the
agent's container, the only places the agent can write), plus ``files`` and whatever ``setup``
(bash, run once as the agent in ``workdir``) makes; the env builds it once per task and
restores it for every episode. ``checks`` are the hidden tests, run by the checker in its own
container on a copy of the writable directories, with ``tests`` (files) in ``/tests``;
``verdict`` says how their outcome is read (:mod:`.verdicts`). ``solution`` is a list of
commands, one per turn, that takes the starting state to a solved one (the oracle's
``expert_action`` follows it).

Tasks come from the package's bundled task folders, from Terminal-Bench 1 or Harbor
(Terminal-Bench 2) task folders (:mod:`.terminal_bench`, :mod:`.harbor`), or from Python.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from multiturn_envs.envs.terminal.verdicts import VERDICTS
from multiturn_envs.sandbox.checker import Check
from multiturn_envs.sandbox.dockerfile import BuildPlan

DIFFICULTIES = ("easy", "medium", "hard")
MAX_MEMORY_MB = 64 << 10
"""The most memory a task may ask for (64 GiB)."""
SOLUTION_DIR = "/solution"
"""Where a task's ``solution_files`` go (Harbor's ``/solution``)."""
NOBODY = "65534:65534"
ROOT = "0:0"


@dataclass(frozen=True)
class TerminalTask:
    """One task (see the module docstring).

    Attributes:
        task_id: unique id.
        instruction: what the agent is told (the first observation).
        checks: the hidden tests; with the ``exit-status`` verdict each is one check
            (``step_score`` is the share passing), otherwise one script whose outcome the
            verdict reads.
        solution: the reference solution, one shell command per turn.
        solution_files: path -> bytes of the files the reference solution reads from
            :data:`SOLUTION_DIR` (Harbor uploads ``solution/`` there before ``solve.sh``
            runs); the directory is writable and empty at the start, the solution's first turn
            puts them in (:func:`~.loading.solution_upload`): the agent never sees them.
        files: ``workdir``-relative path -> content of starting files (tasks made in Python).
        setup: bash run once in ``workdir`` as the agent to finish the starting state.
        category, difficulty: for selection and reports.
        image: the container image (``None``: the terminal image).
        tests: path -> bytes of the files put in ``/tests`` for the checks (Terminal-Bench's
            ``run-tests.sh`` and ``tests/``, Harbor's ``tests/``); never visible to the agent.
        verdict: ``exit-status``, ``pytest-summary`` or ``reward-file`` (:mod:`.verdicts`).
        command_timeout_s: the per-command limit (``None``: the env's).
        check_timeout_s: the limit of one check (``None``: the env's).
        memory_mb: the memory the task asks for (Harbor's ``[environment].memory``): ``verify``
            gives it that; an env gives every task its own ``memory_mb`` (``None``: no ask).
        agent_timeout_s: the limit of a whole agent run in the original harness (Harbor's
            ``[agent].timeout_sec``, Terminal-Bench's ``max_agent_timeout_sec``): an episode
            here is bounded by its turns instead; ``verify`` runs the reference solution
            under it, as Harbor's oracle runs (``None``: the env's ``command_timeout_s`` per
            command).
        workdir: where the shell starts and the checks run (``None``: the image's ``WORKDIR``,
            ``/`` if it has none).
        agent_user, verifier_user: the user of the agent's shell and of the checks: ``uid:gid``,
            a name in the image, or ``""`` for the image's ``USER`` (root when it has none).
            Root works with the file capabilities only (chown, override file modes).
        writable: the directories the agent can write (``None``: ``workdir`` and ``/tmp``
            for a non-root agent; for root, every top-level directory of the image except
            ``/usr``, ``/proc``, ``/sys``, ``/dev`` and ``/boot``).
        environment: variables of the agent's shell (added to the image's own).
        verifier_environment: variables of the checks (added to the image's own).
        build: the Dockerfile the image is built from, when the loader left building to the
            env (a light build: :mod:`.dockerfile`).
        notes: how this task, as run here, differs from its original harness (per task).
        source: where the task was read from (a folder), for reports.
    """

    task_id: str
    instruction: str
    checks: tuple[Check, ...]
    solution: tuple[str, ...]
    solution_files: Mapping[str, bytes] = field(default_factory=dict)
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    setup: str = ""
    category: str = "general"
    difficulty: str = "easy"
    image: str | None = None
    tests: Mapping[str, bytes] = field(default_factory=dict)
    verdict: str = "exit-status"
    command_timeout_s: float | None = None
    check_timeout_s: float | None = None
    agent_timeout_s: float | None = None
    memory_mb: int | None = None
    workdir: str | None = "/app"
    agent_user: str = NOBODY
    verifier_user: str = NOBODY
    writable: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    verifier_environment: Mapping[str, str] = field(default_factory=dict)
    build: BuildPlan | None = None
    notes: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if not self.task_id or not self.instruction.strip():
            raise ValueError("a terminal task needs an id and an instruction")
        if not self.checks:
            raise ValueError(f"task {self.task_id}: no checks")
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"task {self.task_id}: difficulty must be one of {DIFFICULTIES}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"task {self.task_id}: verdict must be one of {VERDICTS}")
        if self.verdict != "exit-status" and len(self.checks) != 1:
            raise ValueError(f"task {self.task_id}: a {self.verdict} verdict reads one script")
        for path in [*self.files, *self.tests, *self.solution_files]:
            if path.startswith("/") or ".." in path.split("/") or not path.strip("/"):
                raise ValueError(f"task {self.task_id}: file path {path!r} leaves its folder")
        for name in ("command_timeout_s", "check_timeout_s", "agent_timeout_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and 0 < value < 1e7):
                raise ValueError(f"task {self.task_id}: {name} must be a number of seconds > 0")
        if self.memory_mb is not None and not 16 <= self.memory_mb <= MAX_MEMORY_MB:
            raise ValueError(f"task {self.task_id}: memory_mb must be 16 to {MAX_MEMORY_MB}")
        for user in (self.agent_user, self.verifier_user):
            if user and not re.fullmatch(r"[\w.-]+(:[\w.-]+)?", user):
                raise ValueError(f"task {self.task_id}: user {user!r} is not user[:group]")
        for path in [*(self.writable or ()), *([self.workdir] if self.workdir else [])]:
            if not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"task {self.task_id}: {path!r} is not an absolute path")


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
