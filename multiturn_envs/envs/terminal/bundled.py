"""The bundled tasks of MT/Terminal-v0: written for this project in Terminal-Bench's style and
shipped as Harbor task folders (``bundled_tasks/<id>/``, package data), loaded by the same
loader users use for their own Harbor tasks (:mod:`.harbor`).

Each task lives in ``/app``, needs no network, and comes with hidden checks
(``tests/checks/*.sh``, each one's exit status read by the checker on a copy of the agent's
state) and a reference solution (``solution/solve.sh``, one command per turn, re-runnable).
Several checks build inputs of their own that the agent never saw (a second data file, other
arguments), so a solution must do the job, not just write the expected text. Their
``environment/Dockerfile`` builds on the terminal image (``ARG BASE``): the env builds each
task's starting state itself (a light build, no ``docker build``). CI runs every reference
solution and an empty submission against the checks (``tests/envs/terminal/
test_bundled_tasks.py``).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from multiturn_envs.envs.terminal.tasks import TerminalTask

PACKAGE = "multiturn_envs.envs.terminal"
FOLDER = "bundled_tasks"


def bundled_root() -> Path:
    """The folder holding the bundled task folders (inside the installed package)."""
    return Path(str(resources.files(PACKAGE).joinpath(FOLDER)))


@cache
def _cached() -> tuple[TerminalTask, ...]:
    from multiturn_envs.envs.terminal.harbor import load_harbor_task

    root = bundled_root()
    folders = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    if not folders:
        raise FileNotFoundError(f"no bundled task folder under {root} (a broken install?)")
    return tuple(load_harbor_task(folder, task_prefix="") for folder in folders)


def bundled_tasks() -> list[TerminalTask]:
    """All bundled tasks (a fresh list of the shared, frozen task objects)."""
    return list(_cached())
