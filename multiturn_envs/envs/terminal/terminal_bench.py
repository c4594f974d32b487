"""Load tasks in Terminal-Bench's folder format, for users who have them.

A Terminal-Bench (1.x) task folder holds ``task.yaml`` (``instruction``, ``difficulty``,
optional ``category``, ``max_test_timeout_sec``, ...), a ``Dockerfile`` that builds the task's
environment (its files land in ``/app``), ``solution.sh`` (or ``solution.yaml``, a list of
keystroke steps), ``run-tests.sh`` and ``tests/`` (pytest). This module turns one into a
:class:`~multiturn_envs.envs.terminal.tasks.TerminalTask`:

* the image: ``image=`` if given, else the tag ``mte-tb-<task>:latest`` when it exists, else
  ``docker build`` of the task's Dockerfile. Offline the build fails whenever the ``FROM`` image
  is not already in the local engine (no image registry is reachable): :class:`ImageUnavailable`
  then says so and how to bring the image in (build it where a registry is reachable, then
  ``docker save`` / ``docker load``). The image must have ``python3`` (the sandbox's runner and
  the checker use it) and, for ``run-tests.sh``, ``pytest`` installed: Terminal-Bench's
  ``run-tests.sh`` usually installs pytest with ``uv`` from the network, which cannot work here;
* the starting ``/app`` is the image's own ``/app``;
* the checks: ``bash $TEST_DIR/run-tests.sh`` with ``run-tests.sh`` and ``tests/`` as the
  checker's support files (``TEST_DIR=/tmp/checks``), scored by pytest's ``-rA`` summary lines
  (Terminal-Bench's parser: the task is resolved when every test passes);
* the reference solution: ``solution.sh`` as one script (one action), or the ``command`` of
  each ``solution.yaml`` step.

Differences from Terminal-Bench's harness (docs/envs/terminal.md): the agent is uid 65534, not
root, under a read-only root filesystem with a writable ``/app`` and ``/tmp``; the tests run in
a separate checker container on a copy of ``/app``, not in the agent's container; the agent
sends commands, not tmux keystrokes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from multiturn_envs.envs.terminal.checker import Check
from multiturn_envs.envs.terminal.tasks import DIFFICULTIES, TerminalTask


class ImageUnavailable(RuntimeError):
    """A Terminal-Bench task's image is neither present nor buildable here."""


def _read_yaml(path: Path) -> Any:
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml ships with the [terminal] extra
        raise ImportError(
            "reading Terminal-Bench tasks needs PyYAML: pip install 'multiturn-envs[terminal]'"
        ) from exc
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _image_exists(tag: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    return done.returncode == 0


def _from_images(dockerfile: Path) -> list[str]:
    names = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)", line, re.IGNORECASE)
        if match:
            names.append(match.group(1))
    return names


def build_task_image(folder: Path, tag: str) -> str:
    """``docker build`` the task's Dockerfile as ``tag``; :class:`ImageUnavailable` if it fails."""
    dockerfile = folder / "Dockerfile"
    if not dockerfile.is_file():
        raise ImageUnavailable(f"{folder}: no Dockerfile, and no image was given (image=...)")
    done = subprocess.run(
        ["docker", "build", "-q", "-t", tag, str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return tag
    bases = [b for b in _from_images(dockerfile) if not _image_exists(b)]
    reason = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
    if bases:
        why = (
            f"its base image {', '.join(bases)} is not in the local engine and cannot be "
            "pulled offline (no image registry is reachable)"
        )
    else:
        why = "a build step failed (steps that download, e.g. apt-get or pip, need the network)"
    raise ImageUnavailable(
        f"the image of Terminal-Bench task {folder.name!r} cannot be built here: {why}. "
        f"docker build said: {reason}. Build it on a machine that can pull "
        f"(docker build -t {tag} {folder}), move it with docker save | docker load, "
        "or pass image=<a local image with the task's environment>."
    )


def _solution(folder: Path) -> tuple[str, ...]:
    script = folder / "solution.sh"
    if script.is_file():
        return (script.read_text(encoding="utf-8"),)
    steps_file = folder / "solution.yaml"
    if steps_file.is_file():
        steps = _read_yaml(steps_file) or []
        commands = tuple(str(step["command"]) for step in steps if step.get("command"))
        if commands:
            return commands
    raise ValueError(f"{folder}: no solution.sh or solution.yaml with commands")


def load_terminal_bench_task(
    folder: str | Path, *, image: str | None = None, build: bool = True
) -> TerminalTask:
    """One Terminal-Bench task folder as a :class:`TerminalTask` (see the module docstring).

    Raises ``ValueError`` for a malformed folder and :class:`ImageUnavailable` when the image
    is missing and cannot be built (``build=False``: never try to build).
    """
    path = Path(folder)
    meta_file = path / "task.yaml"
    if not meta_file.is_file():
        raise ValueError(f"{path}: not a Terminal-Bench task (no task.yaml)")
    meta = _read_yaml(meta_file) or {}
    instruction = meta.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"{meta_file}: 'instruction' is missing")
    difficulty = str(meta.get("difficulty", "medium"))
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"{meta_file}: difficulty {difficulty!r} is not one of {DIFFICULTIES}")
    run_tests = path / "run-tests.sh"
    tests_dir = path / "tests"
    if not run_tests.is_file():
        raise ValueError(f"{path}: run-tests.sh is missing")
    support = {"run-tests.sh": run_tests.read_bytes()}
    if tests_dir.is_dir():
        for file in sorted(tests_dir.rglob("*")):
            if file.is_file():
                support[str(Path("tests") / file.relative_to(tests_dir))] = file.read_bytes()
    task_id = f"tb/{path.name}"
    if image is None:
        tag = f"mte-tb-{re.sub(r'[^a-z0-9_.-]', '-', path.name.lower())}:latest"
        if _image_exists(tag):
            image = tag
        elif build:
            image = build_task_image(path, tag)
        else:
            raise ImageUnavailable(
                f"the image of Terminal-Bench task {path.name!r} ({tag}) is not in the local "
                "engine and build=False"
            )
    return TerminalTask(
        task_id=task_id,
        instruction=instruction,
        checks=(Check("run-tests.sh", 'bash "$TEST_DIR/run-tests.sh"'),),
        solution=_solution(path),
        category=str(meta.get("category", "terminal-bench")),
        difficulty=difficulty,
        image=image,
        support_files=support,
        score_from_pytest=True,
        app_from_image=True,
    )


def load_terminal_bench(root: str | Path, **options: Any) -> list[TerminalTask]:
    """Every task folder under ``root`` (folders with a ``task.yaml``), in name order."""
    folders = sorted(p.parent for p in Path(root).glob("*/task.yaml"))
    return [load_terminal_bench_task(folder, **options) for folder in folders]
