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
from pathlib import Path, PurePosixPath
from typing import Any

from multiturn_envs.envs.terminal.checker import Check
from multiturn_envs.envs.terminal.dockerfile import BuildPlan, base_images, light_plan
from multiturn_envs.envs.terminal.loading import (
    IMAGE_NAME,
    MAX_CPUS,
    MAX_FIELD_CHARS,
    MAX_INSTRUCTION_BYTES,
    MAX_MEMORY_MB,
    MAX_META_BYTES,
    MAX_SCRIPT_BYTES,
    MAX_TASK_DEPTH,
    MAX_TASK_ENTRIES,
    MAX_TEST_FILE_BYTES,
    MAX_TESTS_BYTES,
    MAX_TIMEOUT_S,
    LoadedTasks,
    TaskUnavailable,
    difficulty_of,
    load_all,
    solution_turns,
    task_folder,
)
from multiturn_envs.envs.terminal.tasks import TerminalTask
from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.untrusted import Fields, Folder, load_toml

CHECKS_DIR = "checks"


def read_toml(path: Path) -> dict[str, Any]:
    """A ``task.toml`` (a file the caller named) within the task-folder bounds
    (:data:`~.loading.MAX_META_BYTES`, nesting 64)."""
    return load_toml(path, max_bytes=MAX_META_BYTES)


def _check_name(path: str, script: str) -> str:
    match = re.match(r"#\s*name:\s*(.+)", script)
    if match:
        return match.group(1).strip()[:MAX_FIELD_CHARS]
    return re.sub(r"^\d+-", "", PurePosixPath(path).stem)


def _tests(files: Folder) -> dict[str, bytes]:
    if not files.is_dir("tests"):
        return {}
    return files.read_tree(
        "tests",
        max_file_bytes=MAX_TEST_FILE_BYTES,
        max_total_bytes=MAX_TESTS_BYTES,
        max_entries=MAX_TASK_ENTRIES,
        max_depth=MAX_TASK_DEPTH,
    )


def _memory_mb(environment: Fields) -> int | None:
    if "memory_mb" in environment:
        return environment.integer("memory_mb", default=None, minimum=1, maximum=MAX_MEMORY_MB)
    text = environment.text("memory", max_chars=100, scalars=True).strip().upper()
    match = re.fullmatch(r"(\d{1,12}(?:\.\d{1,12})?)\s*([KMGT]?)I?B?", text)
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

    The folder is read as untrusted (:func:`~.loading.task_folder`: no link out of it, every
    file within its byte cap, fields typed and ranged). Raises ``ValueError`` (an
    :class:`~multiturn_envs.errors.UntrustedInputError` for a refused file or field) for a
    malformed folder and :class:`~multiturn_envs.envs.terminal.loading.TaskUnavailable` for
    one that cannot run here (with the reason).
    """
    path = Path(folder)
    files = task_folder(path)
    if not files.is_file("task.toml"):
        raise ValueError(f"{path}: not a Harbor task (no task.toml)")
    where = files.name("task.toml")
    config = Fields(files.read_toml("task.toml", max_bytes=MAX_META_BYTES), where=where)
    if not files.is_file("instruction.md"):
        raise ValueError(f"{path}: instruction.md is missing")
    instruction = files.read_text("instruction.md", max_bytes=MAX_INSTRUCTION_BYTES)
    if not instruction.strip():
        raise ValueError(f"{files.name('instruction.md')}: the instruction is empty")
    if files.is_dir("steps") or config.get("steps"):
        raise TaskUnavailable("a multi-step Harbor task: this env runs single-step tasks")
    metadata = config.table("metadata")
    agent = config.table("agent")
    verifier = config.table("verifier")
    environment = config.table("environment")
    notes: list[str] = []
    if verifier.get("environment_mode") == "separate" or "environment" in verifier:
        raise TaskUnavailable("a separate verifier environment: not supported here")
    if environment.flag("allow_internet", default=True):
        notes.append("the task allows the internet; this env has no network")
    memory = _memory_mb(environment)
    cpus = environment.number("cpus", default=None, minimum=0.0, maximum=MAX_CPUS)
    if memory is not None or cpus is not None:
        notes.append(
            f"asks for {'?' if cpus is None else f'{cpus:g}'} CPUs and {memory or '?'} MB; the "
            "env's own cpus and memory_mb apply"
        )
    gpus = environment.integer("gpus", default=0, minimum=0, maximum=1024)
    if gpus:
        raise TaskUnavailable(f"needs {gpus} GPU(s)")
    if files.exists("environment/docker-compose.yaml") or files.exists(
        "environment/docker-compose.yml"
    ):
        raise TaskUnavailable("a docker-compose environment (several services): not supported")
    timeout = verifier.number(
        "timeout_sec", default=None, minimum=0.0, maximum=MAX_TIMEOUT_S, exclusive_minimum=True
    )
    agent_user = agent.text("user", max_chars=MAX_FIELD_CHARS, scalars=True)
    verifier_user = verifier.text("user", max_chars=MAX_FIELD_CHARS, scalars=True)
    verifier_env = verifier.text_map("env")
    category = metadata.text("category", max_chars=MAX_FIELD_CHARS) or "harbor"
    docker_image = environment.text("docker_image", max_chars=MAX_FIELD_CHARS)
    if docker_image and not re.fullmatch(IMAGE_NAME, docker_image):
        raise UntrustedInputError(
            f"{where}: environment.docker_image {docker_image[:100]!r} is not an image name"
        )
    tests = _tests(files)
    prefix = f"{CHECKS_DIR}/"
    scripts = sorted(
        name for name in tests if name.startswith(prefix) and "/" not in name[len(prefix) :]
    )
    if files.is_dir(f"tests/{CHECKS_DIR}"):
        checks = []
        for name in scripts:
            if not name.endswith(".sh"):
                continue
            try:
                script = tests[name].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UntrustedInputError(
                    f"{files.name(f'tests/{name}')}: not UTF-8 text (byte {exc.start:,})"
                ) from None
            checks.append(Check(_check_name(name, script), script))
        if not checks:
            raise ValueError(f"{files.name(f'tests/{CHECKS_DIR}')}: no check (*.sh)")
        verdict = "exit-status"
    else:
        if "test.sh" not in tests:
            raise ValueError(f"{path}: tests/test.sh is missing")
        checks = [Check("test.sh", "bash /tests/test.sh")]
        verdict = "reward-file"
    solve = "solution/solve.sh"
    solution = (
        solution_turns(files.read_text(solve, max_bytes=MAX_SCRIPT_BYTES))
        if files.is_file(solve)
        else ()
    )
    if not solution:
        notes.append("no reference solution (solution/solve.sh)")
    name = path.name
    plan: BuildPlan | None = None
    task_image = image or docker_image or None
    if task_image is None:
        context = files.sub("environment") if files.is_dir("environment") else None
        if context is None:
            raise ValueError(f"{path}: no environment/Dockerfile (and no docker_image)")
        plan, task_image, more = plan_image(context.root, f"mte-harbor-{name}", build, map_base)
        notes += more
    return TerminalTask(
        task_id=f"{task_prefix}{name}",
        instruction=instruction,
        checks=tuple(checks),
        solution=solution,
        category=category,
        difficulty=difficulty_of(metadata.get("difficulty")),
        image=task_image,
        tests=tests,
        verdict=verdict,
        check_timeout_s=timeout,
        workdir=None,
        agent_user=agent_user,
        verifier_user=verifier_user,
        verifier_environment=verifier_env,
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

    files = task_folder(context)
    if not files.is_file("Dockerfile"):
        raise ValueError(f"{context}: no Dockerfile (and no docker_image in task.toml)")
    text = files.read_text("Dockerfile", max_bytes=MAX_SCRIPT_BYTES)
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
