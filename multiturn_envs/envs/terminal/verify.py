"""Check that tasks run here: each one's reference solution passes its tests and an empty
submission fails, in MT/Terminal-v0 itself (the numbers of docs/envs/terminal.md's table).

    multiturn-envs sandbox terminal verify FOLDER [--task-format auto|tb|harbor] [--json]

``FOLDER`` holds task folders (Terminal-Bench 1: ``task.yaml``; Harbor: ``task.toml``) or is
one. For each task it prints whether it loaded (or why not), the notes on what differs from
its original harness, whether the reference solution passes, whether an empty submission
fails, and the verdict's details when one of them is not what the original harness gives (a
validated task's reference solution passes, its starting state fails). A task folder that is
refused (malformed, or hostile: a link out of it, a file over its cap, a field out of range) is
one row with its reason (``cause`` ``refused``), never a traceback: the command prints one line
for it and exits 2 (a user's error) once every task has been reported.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multiturn_envs.envs.terminal.checker import CheckReport
from multiturn_envs.envs.terminal.tasks import TerminalTask


@dataclass
class Verification:
    """What :func:`verify_task` found for one task."""

    task_id: str
    loaded: bool = True
    reason: str = ""
    cause: str = ""
    """For a task that did not load: ``refused`` (a malformed or hostile folder: the user's
    error), ``error`` (a failure of ours) or why it cannot run here (``network``, ``base``...)."""
    notes: list[str] = field(default_factory=list)
    reference_passes: bool | None = None
    empty_fails: bool | None = None
    detail: str = ""
    seconds: float = 0.0

    @property
    def as_expected(self) -> bool:
        """The verdicts a validated task gets from its original harness."""
        return bool(self.loaded and self.reference_passes and self.empty_fails)


def _detail(report: CheckReport) -> str:
    if report.error:
        return f"checker error: {report.error}"
    if report.note:
        return report.note
    failed = [n for n, ok in zip(report.names, report.passed) if not ok]
    tail = report.outputs[-1][-400:] if report.outputs else ""
    return f"failing: {', '.join(failed)[:200]}; output tail: {tail!r}"


def verify_task(task: TerminalTask, **env_options: Any) -> Verification:
    """Run ``task``'s reference solution and an empty submission in a fresh env."""
    from multiturn_envs.envs.terminal.env import TerminalEnv

    start = time.monotonic()
    result = Verification(task.task_id, notes=list(task.notes))
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False, **env_options)
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        result.notes = list(env.prepared().notes)
        empty = env.check_report()
        result.empty_fails = not empty.all_passed
        if not result.empty_fails:
            result.detail = "the starting state already passes"
        for command in task.solution:
            env.step(command)
        report = env.check_report()
        result.reference_passes = report.all_passed
        if not report.all_passed:
            result.detail = _detail(report)
    except Exception as exc:  # a task that cannot start: its reason is the result
        from multiturn_envs.envs.terminal.loading import refusal_cause

        result.loaded = False
        result.cause = refusal_cause(exc)
        result.reason = f"{type(exc).__name__}: {exc}"
    finally:
        env.close()
    result.seconds = time.monotonic() - start
    return result


def load_folder(
    folder: Path, fmt: str = "auto", **options: Any
) -> tuple[list[TerminalTask], dict[str, str], dict[str, str]]:
    """The tasks under ``folder``, and for those that did not load their reasons and causes
    (``tb/<folder name>`` or ``harbor/<folder name>``, as the task ids, -> text).
    ``options`` go to the loaders (``map_base``...)."""
    from multiturn_envs.envs.terminal.harbor import load_harbor
    from multiturn_envs.envs.terminal.loading import LoadedTasks, NoTasksLoaded
    from multiturn_envs.envs.terminal.terminal_bench import load_terminal_bench

    loaders = {"tb": [load_terminal_bench], "harbor": [load_harbor]}
    chosen = loaders.get(fmt, [load_terminal_bench, load_harbor])
    tasks: list[TerminalTask] = []
    problems: dict[str, str] = {}
    causes: dict[str, str] = {}
    found = False
    for load in chosen:
        prefix = "tb/" if load is load_terminal_bench else "harbor/"  # as the tasks' ids
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                loaded: LoadedTasks | NoTasksLoaded = load(folder, **options)
            except NoTasksLoaded as exc:
                if not exc.problems:  # no task of this format there
                    continue
                loaded = exc
        found = True
        if isinstance(loaded, LoadedTasks):
            tasks += list(loaded)
        problems.update({prefix + name: why for name, why in loaded.problems.items()})
        causes.update({prefix + name: cause for name, cause in loaded.causes.items()})
    if not found:
        raise NoTasksLoaded(f"no Terminal-Bench 1 or Harbor task under {folder}")
    return tasks, problems, causes


def verify_folder(folder: Path, fmt: str = "auto", **env_options: Any) -> list[Verification]:
    """Every task of ``folder`` verified, and a row for each task that could not load (with
    why), sorted by task id (``multiturn-envs sandbox terminal verify`` prints them).
    ``env_options`` go to each task's env (``image``, ``memory_mb``...)."""
    tasks, problems, causes = load_folder(folder, fmt)
    rows = [
        Verification(name, loaded=False, reason=why, cause=causes.get(name, ""))
        for name, why in problems.items()
    ]
    rows += [verify_task(task, **env_options) for task in tasks]
    return sorted(rows, key=lambda r: r.task_id)
