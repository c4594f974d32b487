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

import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multiturn_envs.envs.terminal.tasks import TerminalTask
from multiturn_envs.envs.terminal.verdicts import CheckReport


@dataclass
class Verification:
    """What :func:`verify_task` found for one task. ``cause``: one word for why it is not as
    expected (``""`` when it is). For a task that did not load: ``refused`` (a malformed or
    hostile folder: the user's error), ``error`` (a failure of ours) or why it cannot run here
    (:class:`~.loading.TaskUnavailable`'s: ``network``, ``base``...). For a task that ran:
    ``timeout`` (the reference solution outlived the task's agent timeout), ``network``,
    ``command`` or ``package`` (what the solution's or the tests' output shows was lacking),
    ``tests`` (the tests fail for another reason), ``empty-passes``."""

    task_id: str
    loaded: bool = True
    reason: str = ""
    cause: str = ""
    notes: list[str] = field(default_factory=list)
    reference_passes: bool | None = None
    empty_fails: bool | None = None
    detail: str = ""
    seconds: float = 0.0
    solution_seconds: float = 0.0

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


_INSTALL_FAILED = re.compile(
    r"^E: (Unable to locate package|Package '.+' has no installation candidate|Method \w+ has "
    r"died|Failed to fetch|Version '.+' for '.+' was not found)|Could not find a version that "
    r"satisfies the requirement|No matching distribution found|externally-managed-environment",
    re.MULTILINE,
)
_MISSING_COMMAND = re.compile(r"(?:^|\n)(?:bash: (?:line \d+: )?)?([\w.+-]+): command not found")
_MISSING_MODULE = re.compile(r"No module named '?([\w.]+)")


def why_reference_fails(
    outputs: list[str], notes: list[str], tests: list[str] | None = None
) -> tuple[str, str]:
    """``(cause, sentence)`` for a reference solution that does not pass, from what its
    commands printed: the network it needed (an error of a download, or an install of what the
    image lacks by apt-get or pip), then a command or Python module the image lacks
    (in its output or the tests'), then a package missing at build time (the notes), else
    ``tests``."""
    from multiturn_envs.sandbox.task_images import NETWORK

    text = "\n".join(outputs)
    hits = [line.strip() for line in text.splitlines() if NETWORK.search(line)]
    if hits:  # the last one: the error a traceback ends with, not a line of its code
        return "network", f"the reference solution needs the network: {hits[-1][:200]}"
    installs = [line.strip() for line in text.splitlines() if _INSTALL_FAILED.search(line)]
    if installs:  # apt-get or pip asked for what is not in the image: a download, offline
        return "network", (
            "the reference solution installs software that is not in the image (a download): "
            f"{installs[-1][:200]}"
        )
    refused = [
        line.strip()
        for out in tests or []
        for line in out.splitlines()
        if "mte-offline: not installed" in line
    ]
    if refused:  # the tests' own uvx/pip asked for a package the image lacks
        return "package", f"the tests need what the image lacks: {refused[-1][:200]}"
    printed = "\n".join([text, *(tests or [])])
    command = _MISSING_COMMAND.search(printed)
    if command is not None:
        return "command", f"{command.group(1)} is run and the image lacks it"
    module = _MISSING_MODULE.search(printed)
    if module is not None:
        return "package", f"the Python module {module.group(1)} is imported and the image lacks it"
    lacking = [n for n in notes if n.startswith("offline, the image lacks")]
    if lacking:
        return "package", lacking[0]
    return "tests", ""


def verify_task(task: TerminalTask, **env_options: Any) -> Verification:
    """Run ``task``'s reference solution and an empty submission in a fresh env.

    The solution runs as Harbor's oracle runs it: all of it under the task's agent timeout
    (``agent_timeout_s``; without one, each command under the env's ``command_timeout_s``), in
    containers with the memory the task asks for (``memory_mb``; ``env_options`` win)."""
    from multiturn_envs.envs.terminal.env import TerminalEnv

    start = time.monotonic()
    result = Verification(task.task_id, notes=list(task.notes))
    if task.memory_mb is not None:  # what Harbor gives the task (the caller's choice wins)
        env_options = {"memory_mb": task.memory_mb, **env_options}
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False, **env_options)
    outputs: list[str] = []
    timed_out = False
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        result.notes = list(env.prepared().notes)
        empty = env.check_report()
        result.empty_fails = not empty.all_passed
        if not result.empty_fails:
            result.cause, result.detail = "empty-passes", "the starting state already passes"
        began = time.monotonic()
        for command in task.solution:
            if task.agent_timeout_s is not None:
                left = task.agent_timeout_s - (time.monotonic() - began)
                if left <= 0:
                    timed_out = True
                    break
                env.command_timeout_s = left
            observation, _, _, _, info = env.step(command)
            outputs.append(_ends(observation, SOLUTION_KEEP))
            if info.get("timed_out"):
                timed_out = True
                break
        result.solution_seconds = time.monotonic() - began
        report = env.check_report()
        result.reference_passes = report.all_passed
        if not report.all_passed:
            if timed_out:
                limit = task.agent_timeout_s or env.command_timeout_s
                cause, why = "timeout", f"the reference solution did not finish within {limit:g} s"
            else:
                tests = [_ends(out, SOLUTION_KEEP) for out in report.outputs]
                cause, why = why_reference_fails(outputs, result.notes, tests)
            result.cause = cause
            result.detail = "; ".join(part for part in (why, _detail(report)) if part)
    except Exception as exc:  # a task that cannot start: its reason is the result
        from multiturn_envs.envs.terminal.loading import refusal_cause

        result.loaded = False
        result.cause = refusal_cause(exc)
        result.reason = f"{type(exc).__name__}: {exc}"
    finally:
        env.close()
    result.seconds = time.monotonic() - start
    return result


SOLUTION_KEEP = 3000
"""The characters kept of each end of a solution command's output (and of the tests'), to
explain a failure: an installer's network error comes first, a traceback's last line last."""


def _ends(text: str, keep: int) -> str:
    return text if len(text) <= 2 * keep else f"{text[:keep]}\n...\n{text[-keep:]}"


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
