"""Load tasks in the Harbor format (Terminal-Bench 2.0 and the bundled tasks of this env).

A Harbor task folder holds ``task.toml`` (metadata and limits), ``instruction.md`` (what the
agent is told), ``environment/`` (the build context: ``Dockerfile``), ``solution/solve.sh``
(the reference solution) and ``tests/`` (``test.sh``, which writes the reward to
``/logs/verifier/reward.txt`` or ``reward.json``). This module turns one into a
:class:`~multiturn_envs.envs.terminal.tasks.TerminalTask`:

* the image: ``[environment].docker_image`` when given (Harbor's prebuilt image), else the
  task's ``environment/Dockerfile``: a light one is built by the env at the first reset
  (:mod:`.dockerfile`), another by ``docker build`` here (its ``FROM`` mapped onto the
  terminal image when the base cannot be pulled and ``map_base`` allows it);
* the tests: every file of ``tests/`` in ``/tests``; ``bash /tests/test.sh`` as the verifier
  user, the verdict from the reward file (:mod:`.verdicts`), Harbor's rule. A
  ``tests/checks/*.sh`` folder (a multiturn-envs extension, used by the bundled tasks) makes
  each script a check of its own whose exit status the checker reads itself: a verdict no file
  the agent's code could write stands in for, and ``step_score`` the share of checks passing;
  ``test.sh`` stays the entry point real Harbor runs;
* users: ``[agent].user`` and ``[verifier].user``, else the image's ``USER`` (root when none);
* limits: ``[verifier].timeout_sec`` is the limit of a check; ``[agent].timeout_sec`` (one
  limit for a whole agent run) has no counterpart here: an episode is bounded by its turns and
  each command by the env's ``command_timeout_s``;
* the reference solution: ``solution/solve.sh``, one turn (or several, separated by
  ``# --- next turn ---`` lines).

What a Harbor task asks and this env does not do is in the task's ``notes`` (no network even
when ``allow_internet`` is true; the env's own CPU and memory limits), and a task that cannot
run here at all (several containers, multi-step tasks, a separate verifier image) raises
:class:`~multiturn_envs.envs.terminal.loading.TaskUnavailable` with the reason.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from multiturn_envs.envs.terminal.checker import Check
from multiturn_envs.envs.terminal.dockerfile import BuildPlan, base_images, light_plan
from multiturn_envs.envs.terminal.loading import (
    LoadedTasks,
    TaskUnavailable,
    difficulty_of,
    load_all,
    solution_turns,
)
from multiturn_envs.envs.terminal.tasks import TerminalTask

CHECKS_DIR = "checks"


def read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as exc:
            raise ImportError(
                "reading Harbor tasks on Python 3.10 needs tomli: "
                "pip install 'multiturn-envs[terminal]'"
            ) from exc
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from exc
    return dict(data)


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name) or {}
    if not isinstance(value, dict):
        raise ValueError(f"task.toml: [{name}] is not a table")
    return value


def _check_name(path: Path, script: str) -> str:
    match = re.match(r"#\s*name:\s*(.+)", script)
    if match:
        return match.group(1).strip()
    return re.sub(r"^\d+-", "", path.stem)


def _tests(folder: Path) -> dict[str, bytes]:
    tests_dir = folder / "tests"
    files: dict[str, bytes] = {}
    if tests_dir.is_dir():
        for file in sorted(tests_dir.rglob("*")):
            if file.is_file():
                files[file.relative_to(tests_dir).as_posix()] = file.read_bytes()
    return files


def _memory_mb(environment: dict[str, Any]) -> int | None:
    if "memory_mb" in environment:
        return int(environment["memory_mb"])
    text = str(environment.get("memory", "")).strip().upper()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)I?B?", text)
    if not match:
        return None
    scale = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[match.group(2)]
    return int(float(match.group(1)) * scale)


def load_harbor_task(
    folder: str | Path,
    *,
    image: str | None = None,
    build: bool = True,
    map_base: bool = True,
    task_prefix: str = "harbor/",
) -> TerminalTask:
    """One Harbor task folder as a :class:`TerminalTask` (see the module docstring).

    Args:
        image: an image that already holds the task's environment (skips any build).
        build: build the image now when it needs ``docker build`` (``False``: say so
            instead); a light Dockerfile is built by the env at the first reset either way.
        map_base: when the Dockerfile's base is not in the local engine, build it on the
            terminal image instead (``FROM`` mapped; the task's notes say so).
        task_prefix: the start of the task's id (``harbor/<folder name>``).

    Raises ``ValueError`` for a malformed folder and
    :class:`~multiturn_envs.envs.terminal.loading.TaskUnavailable` for one that cannot run
    here (with the reason).
    """
    path = Path(folder)
    config_file = path / "task.toml"
    if not config_file.is_file():
        raise ValueError(f"{path}: not a Harbor task (no task.toml)")
    config = read_toml(config_file)
    instruction_file = path / "instruction.md"
    if not instruction_file.is_file():
        raise ValueError(f"{path}: instruction.md is missing")
    instruction = instruction_file.read_text(encoding="utf-8")
    if not instruction.strip():
        raise ValueError(f"{instruction_file}: the instruction is empty")
    if (path / "steps").is_dir() or config.get("steps"):
        raise TaskUnavailable("a multi-step Harbor task: this env runs single-step tasks")
    metadata = _section(config, "metadata")
    agent = _section(config, "agent")
    verifier = _section(config, "verifier")
    environment = _section(config, "environment")
    notes: list[str] = []
    if verifier.get("environment_mode") == "separate" or "environment" in verifier:
        raise TaskUnavailable("a separate verifier environment: not supported here")
    if environment.get("allow_internet", True):
        notes.append("the task allows the internet; this env has no network")
    memory = _memory_mb(environment)
    if memory is not None or environment.get("cpus") is not None:
        notes.append(
            f"asks for {environment.get('cpus', '?')} CPUs and {memory or '?'} MB; the env's own "
            "cpus and memory_mb apply"
        )
    if environment.get("gpus"):
        raise TaskUnavailable(f"needs {environment['gpus']} GPU(s)")
    if (path / "environment" / "docker-compose.yaml").is_file() or (
        path / "environment" / "docker-compose.yml"
    ).is_file():
        raise TaskUnavailable("a docker-compose environment (several services): not supported")
    tests = _tests(path)
    checks_dir = path / "tests" / CHECKS_DIR
    if checks_dir.is_dir():
        checks = []
        for file in sorted(checks_dir.glob("*.sh")):
            script = file.read_text(encoding="utf-8")
            checks.append(Check(_check_name(file, script), script))
        if not checks:
            raise ValueError(f"{checks_dir}: no check (*.sh)")
        verdict = "exit-status"
    else:
        if "test.sh" not in tests:
            raise ValueError(f"{path}: tests/test.sh is missing")
        checks = [Check("test.sh", "bash /tests/test.sh")]
        verdict = "reward-file"
    solve = path / "solution" / "solve.sh"
    solution = solution_turns(solve.read_text(encoding="utf-8")) if solve.is_file() else ()
    if not solution:
        notes.append("no reference solution (solution/solve.sh)")
    name = path.name
    plan: BuildPlan | None = None
    task_image = image or environment.get("docker_image") or None
    if task_image is None:
        plan, task_image, more = plan_image(
            path / "environment", f"mte-harbor-{name}", build, map_base
        )
        notes += more
    timeout = verifier.get("timeout_sec")
    return TerminalTask(
        task_id=f"{task_prefix}{name}",
        instruction=instruction,
        checks=tuple(checks),
        solution=solution,
        category=str(metadata.get("category") or "harbor"),
        difficulty=difficulty_of(metadata.get("difficulty")),
        image=task_image,
        tests=tests,
        verdict=verdict,
        check_timeout_s=float(timeout) if timeout else None,
        workdir=None,
        agent_user=str(agent.get("user") or ""),
        verifier_user=str(verifier.get("user") or ""),
        verifier_environment={str(k): str(v) for k, v in (verifier.get("env") or {}).items()},
        build=plan,
        notes=tuple(notes),
        source=str(path),
    )


def plan_image(
    context: Path, prefix: str, build: bool, map_base: bool
) -> tuple[BuildPlan | None, str, list[str]]:
    """The image of a task built from ``context/Dockerfile``: ``(plan, tag, notes)``.

    A light plan is left to the env (built at the first reset); a heavy one is built now
    (with ``build``), its ``FROM`` mapped onto the terminal image when its base is not in the
    local engine (with ``map_base``)."""
    from multiturn_envs.envs.terminal.image import terminal_image
    from multiturn_envs.envs.terminal.task_images import (
        ImageUnavailable,
        content_tag,
        ensure_task_image,
        image_exists,
        image_id,
        mapped_dockerfile,
    )

    dockerfile = context / "Dockerfile"
    if not dockerfile.is_file():
        raise ValueError(f"{context}: no Dockerfile (and no docker_image in task.toml)")
    text = dockerfile.read_text(encoding="utf-8")
    plan = light_plan(context, text, {"BASE": terminal_image()})
    notes: list[str] = []
    if plan.light:  # no engine needed to load it: the env builds it at the first reset
        return plan, content_tag(prefix, context, plan.base), notes
    bases = [b for b in base_images(text) if "$" not in b]
    missing = [b for b in bases if not image_exists(b)]
    mapped = False
    if missing:
        if not map_base:
            raise ImageUnavailable(
                f"its base image {', '.join(missing)} is not in the local engine and cannot be "
                "pulled here: build the image where it can be pulled and bring it with "
                "docker save | docker load, pass image=..., or allow map_base",
                "base",
            )
        text, replaced = mapped_dockerfile(text, terminal_image())
        notes.append(
            f"FROM {', '.join(replaced)} mapped onto {terminal_image()} (Debian 12, Python 3.11, "
            "pytest 7.2; the base cannot be pulled here)"
        )
        mapped = True
    tag = content_tag(prefix, context, image_id(terminal_image()))  # rebuilt when it changes
    notes += ensure_task_image(
        context, text, tag, build=build, mapped=mapped, build_args={"BASE": terminal_image()}
    )
    return None, tag, notes


def load_harbor(root: str | Path, **options: Any) -> LoadedTasks:
    """Every Harbor task folder under ``root`` (folders with a ``task.toml``), in name order.

    A task that cannot run here is left out with its reason (``result.problems``, and a
    warning); when none can, :class:`~multiturn_envs.envs.terminal.loading.NoTasksLoaded`
    says why for each. ``options`` go to :func:`load_harbor_task`."""
    return load_all(root, "task.toml", lambda f: load_harbor_task(f, **options), "Harbor")
