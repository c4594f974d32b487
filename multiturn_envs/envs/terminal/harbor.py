"""Load tasks in the Harbor format (Terminal-Bench 2.0 and the bundled tasks of this env).

A Harbor task folder holds ``task.toml`` (metadata and limits), ``instruction.md`` (what the
agent is told), ``environment/`` (the build context: ``Dockerfile``), ``solution/solve.sh``
(the reference solution) and ``tests/`` (``test.sh``, which writes the reward to
``/logs/verifier/reward.txt`` or ``reward.json``). This module turns one into a
:class:`~multiturn_envs.envs.terminal.tasks.TerminalTask` the way Harbor runs it
(``environments/docker/docker.py``, ``verifier/verifier.py``, ``agents/oracle.py``):

* the image: ``[environment].docker_image`` (Harbor's prebuilt image) when the local engine has
  it; else, as Harbor does when it builds, the task's ``environment/Dockerfile`` with
  ``environment/`` as the build context (the task's notes say so). A light Dockerfile on a
  local image is built by the env at the first reset (:mod:`.dockerfile`); another by
  ``docker build`` here, every ``FROM`` of an image the engine lacks mapped onto the terminal
  image when ``map_base`` allows it (whatever the Dockerfile's shape);
* the tests: every file of ``tests/`` in ``/tests``; ``bash /tests/test.sh`` as the verifier
  user, the verdict from the reward file (:mod:`.verdicts`), Harbor's rule. A
  ``tests/checks/*.sh`` folder (a multiturn-envs extension, used by the bundled tasks) makes
  each script a check of its own whose exit status the checker reads itself: a verdict no file
  the agent's code could write stands in for, and ``step_score`` the share of checks passing;
  ``test.sh`` stays the entry point real Harbor runs;
* users: ``[agent].user`` and ``[verifier].user``, else the image's ``USER`` (root when none);
* variables: ``[environment].env`` in the agent's shell (so in the reference solution) and in
  the tests, ``[verifier].env`` in the tests (it wins), as Harbor passes them to every
  ``exec``; a ``${NAME}`` or ``${NAME:-default}`` value is Harbor's template for a variable
  of the host, filled in only from the ``host_env`` the caller passes (never from this
  process's own environment: a task file does not choose what of the host it receives);
* limits: ``[verifier].timeout_sec`` is the limit of a check; ``[agent].timeout_sec`` (one
  limit for a whole agent run) bounds the reference solution in ``verify``; an episode is
  bounded by its turns and each command by the env's ``command_timeout_s``;
* the reference solution: ``solution/solve.sh``, one turn (or several, separated by
  ``# --- next turn ---`` lines).

What a Harbor task asks and this env does not do is in the task's ``notes`` (no network even
when ``allow_internet`` is true; the env's own CPU and memory limits), and a task that cannot
run here at all (several containers, multi-step tasks, a separate verifier image, GPUs, an
image that cannot be built offline) raises
:class:`~multiturn_envs.errors.TaskUnavailable` with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from multiturn_envs.envs.terminal.loading import (
    DOWNLOADS,
    IMAGE_NAME,
    MAX_CPUS,
    MAX_FIELD_CHARS,
    MAX_INSTRUCTION_BYTES,
    MAX_META_BYTES,
    MAX_SCRIPT_BYTES,
    MAX_TASK_DEPTH,
    MAX_TASK_ENTRIES,
    MAX_TEST_FILE_BYTES,
    MAX_TESTS_BYTES,
    MAX_TIMEOUT_S,
    LoadedTasks,
    difficulty_of,
    load_all,
    script_solution,
    solution_turns,
    task_folder,
)
from multiturn_envs.envs.terminal.tasks import MAX_MEMORY_MB, TerminalTask
from multiturn_envs.errors import TaskUnavailable, UntrustedInputError
from multiturn_envs.sandbox.checker import Check
from multiturn_envs.sandbox.dockerfile import BuildPlan, base_images, light_plan
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
    """The memory ``[environment]`` asks for, in MB (``memory_mb``, or Harbor's older
    ``memory = "2G"``); ``None`` when it asks none or says it in a form not understood."""
    if "memory_mb" in environment:
        return environment.integer("memory_mb", default=None, minimum=16, maximum=MAX_MEMORY_MB)
    text = environment.text("memory", max_chars=100, scalars=True).strip().upper()
    match = re.fullmatch(r"(\d{1,12}(?:\.\d{1,12})?)\s*([KMGT]?)I?B?", text)
    if not match:
        return None
    scale = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[match.group(2)]
    memory = int(float(match.group(1)) * scale)
    if not 16 <= memory <= MAX_MEMORY_MB:
        raise UntrustedInputError(
            f"{environment.where}: {environment.prefix}memory asks for {memory:,} MB (16 to "
            f"{MAX_MEMORY_MB:,})"
        )
    return memory


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}", re.DOTALL)
ENV_CAP = 64 << 10
"""The most bytes a task's variables may hold (names and values together)."""


def task_variables(section: Fields, host_env: Mapping[str, str] | None) -> dict[str, str]:
    """The ``env`` table of a ``task.toml`` section as the variables Harbor passes to the
    container.

    A value that is exactly ``${NAME}`` or ``${NAME:-default}`` is Harbor's template for a
    variable of the host: it is filled in from ``host_env`` (the caller's choice, never this
    process's own environment), else from its default; a template with neither makes the task
    unavailable (cause ``env``), naming the variable. Other values are taken as they are
    (numbers as their text). Names must be shell variable names, values text without NUL, all
    of it at most :data:`ENV_CAP` bytes."""
    table = section.text_map("env", max_chars=ENV_CAP)
    where = f"{section.where}: {section.prefix}env"
    out: dict[str, str] = {}
    for name, value in table.items():
        if not _NAME.fullmatch(name):
            raise UntrustedInputError(f"{where}: {name[:100]!r} is not a variable name")
        template = _TEMPLATE.fullmatch(value)
        if template is not None:
            host, default = template.group(1), template.group(2)
            if host_env is not None and host in host_env:
                value = str(host_env[host])
            elif default is not None:
                value = default
            else:
                raise TaskUnavailable(
                    f"{section.prefix}env.{name} is the host variable ${{{host}}}: pass it with "
                    f"host_env={{'{host}': ...}} (the host's environment is never read for a "
                    "task)",
                    "env",
                )
        if "\0" in value:
            raise UntrustedInputError(f"{where}.{name} holds a NUL character")
        out[name] = value
    if sum(len(k) + len(v) for k, v in out.items()) > ENV_CAP:
        raise UntrustedInputError(f"{where} holds more than {ENV_CAP:,} bytes")
    return out


def load_harbor_task(
    folder: str | Path,
    *,
    image: str | None = None,
    build: bool = True,
    map_base: bool = True,
    host_env: Mapping[str, str] | None = None,
    task_prefix: str = "harbor/",
) -> TerminalTask:
    """One Harbor task folder as a :class:`TerminalTask` (see the module docstring).

    Args:
        image: an image that already holds the task's environment (skips any build).
        build: build the image now when it needs ``docker build`` (``False``: say so
            instead); a light Dockerfile is built by the env at the first reset either way.
        map_base: when an image the Dockerfile builds on is not in the local engine, build it
            on the terminal image instead (``FROM`` mapped; the task's notes say so).
        host_env: the host variables a ``${NAME}`` template of ``[environment].env`` or
            ``[verifier].env`` may receive (``None``: none; a template's default then applies).
        task_prefix: the start of the task's id (``harbor/<folder name>``).

    The folder is read as untrusted (:func:`~.loading.task_folder`: no link out of it, every
    file within its byte cap, fields typed and ranged). Raises ``ValueError`` (an
    :class:`~multiturn_envs.errors.UntrustedInputError` for a refused file or field) for a
    malformed folder and :class:`~multiturn_envs.errors.TaskUnavailable` for
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
        raise TaskUnavailable("a separate verifier environment: not supported here", "services")
    gpus = environment.integer("gpus", default=0, minimum=0, maximum=1024)
    if gpus:
        raise TaskUnavailable(f"needs {gpus} GPU(s): none here", "gpu")
    if files.exists("environment/docker-compose.yaml") or files.exists(
        "environment/docker-compose.yml"
    ):
        raise TaskUnavailable(
            "a docker-compose environment (several services): not supported", "services"
        )
    variables = task_variables(environment, host_env)
    verifier_variables = task_variables(verifier, host_env)
    if environment.flag("allow_internet", default=True):
        notes.append("the task allows the internet; this env has no network")
    memory = _memory_mb(environment)
    cpus = environment.number("cpus", default=None, minimum=0.0, maximum=MAX_CPUS)
    if memory is not None or cpus is not None:
        notes.append(
            f"asks for {'?' if cpus is None else f'{cpus:g}'} CPUs and {memory or '?'} MB: "
            "verify gives it that memory; an env gives each task its own cpus and memory_mb "
            f"(pass memory_mb={memory or 2048} for this one)"
        )
    if config.table("solution").get("env"):
        notes.append("[solution].env is not applied (the solution runs in the agent's shell)")
    timeout = verifier.number(
        "timeout_sec", default=None, minimum=0.0, maximum=MAX_TIMEOUT_S, exclusive_minimum=True
    )
    agent_timeout = agent.number(
        "timeout_sec", default=None, minimum=0.0, maximum=MAX_TIMEOUT_S, exclusive_minimum=True
    )
    agent_user = agent.text("user", max_chars=MAX_FIELD_CHARS, scalars=True)
    verifier_user = verifier.text("user", max_chars=MAX_FIELD_CHARS, scalars=True)
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
    script = files.read_text(solve, max_bytes=MAX_SCRIPT_BYTES) if files.is_file(solve) else ""
    solution: tuple[str, ...] = ()
    solution_files: dict[str, bytes] = {}
    if not solution_turns(script):
        notes.append("no reference solution (solution/solve.sh)")
    else:
        if DOWNLOADS.search(script):
            notes.append(
                "the reference solution downloads or installs something: offline it may fail"
            )
        # Harbor's oracle uploads solution/ to /solution before solve.sh
        solution, solution_files, more = script_solution("solve.sh", script, _solution_files(files))
        notes += more
    name = path.name
    plan: BuildPlan | None = None
    task_image = image or _prebuilt(docker_image, files, notes)
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
        solution_files=solution_files,
        category=category,
        difficulty=difficulty_of(metadata.get("difficulty")),
        image=task_image,
        tests=tests,
        verdict=verdict,
        check_timeout_s=timeout,
        agent_timeout_s=agent_timeout,
        memory_mb=memory,
        workdir=None,
        agent_user=agent_user,
        verifier_user=verifier_user,
        environment=variables,
        verifier_environment={**variables, **verifier_variables},
        build=plan,
        notes=tuple(notes),
        source=str(path),
    )


SOLUTION_FILES_CAP = 4 << 20
"""The most bytes of ``solution/`` files besides ``solve.sh`` (they travel in a command)."""


def _solution_files(files: Folder) -> dict[str, bytes]:
    """The files of ``solution/`` besides ``solve.sh`` (read as untrusted: no link out of the
    folder, at most :data:`SOLUTION_FILES_CAP` bytes in all)."""
    if not files.is_dir("solution"):
        return {}
    tree = files.read_tree(
        "solution",
        max_total_bytes=SOLUTION_FILES_CAP,
        max_entries=MAX_TASK_ENTRIES,
        max_depth=MAX_TASK_DEPTH,
    )
    return {name: data for name, data in tree.items() if name != "solve.sh"}


def _prebuilt(docker_image: str, files: Folder, notes: list[str]) -> str | None:
    """The task's prebuilt ``docker_image`` when the local engine has it (Harbor's default
    path); ``None`` to build ``environment/Dockerfile`` instead, as Harbor does when it
    builds (the notes say why)."""
    from multiturn_envs.sandbox.task_images import ImageUnavailable, image_exists

    if not docker_image:
        return None
    try:
        present = image_exists(docker_image)
    except OSError:  # no docker command here: the image is not here either
        present = False
    if present:
        return docker_image
    if not files.is_file("environment/Dockerfile"):
        raise ImageUnavailable(
            f"its prebuilt image {docker_image} is not in the local engine and cannot be pulled "
            "here, and it has no environment/Dockerfile to build: bring the image with docker "
            "save | docker load, or pass image=...",
            "base",
        )
    notes.append(
        f"the prebuilt image {docker_image} is not in the local engine (it cannot be pulled "
        "here): built from environment/Dockerfile, as Harbor builds it"
    )
    return None


def plan_image(
    context: Path, prefix: str, build: bool, map_base: bool
) -> tuple[BuildPlan | None, str, list[str]]:
    """The image of a task built from ``context/Dockerfile``: ``(plan, tag, notes)``.

    A light plan on the terminal image is left to the env (built at the first reset, no
    engine needed to load it). Otherwise the images the Dockerfile builds on are looked up in
    the local engine: when one is missing, every ``FROM`` of an image is mapped onto the
    terminal image (with ``map_base``; any shape: one stage or several) and the result built
    now with ``docker build`` (with ``build``); when none is, a light plan is left to the env
    and another Dockerfile built now."""
    from multiturn_envs.sandbox.task_images import (
        ImageUnavailable,
        content_tag,
        ensure_task_image,
        image_exists,
        image_id,
        mapped_dockerfile,
    )
    from multiturn_envs.sandbox.terminal_image import terminal_image

    files = task_folder(context)
    if not files.is_file("Dockerfile"):
        raise ValueError(f"{context}: no Dockerfile (and no docker_image in task.toml)")
    text = files.read_text("Dockerfile", max_bytes=MAX_SCRIPT_BYTES)
    build_args = {"BASE": terminal_image()}
    plan = light_plan(context, text, build_args)
    notes: list[str] = []
    if plan.light and plan.base == terminal_image():
        return plan, content_tag(prefix, context, plan.base), notes
    missing = [b for b in base_images(text, build_args) if not image_exists(b)]
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
    elif plan.light:  # on a local image: the env builds it at the first reset
        return plan, content_tag(prefix, context, plan.base), notes
    bases = " ".join(image_id(b) for b in base_images(text, build_args))
    tag = content_tag(prefix, context, bases)  # rebuilt when a base changes
    notes += ensure_task_image(
        context, text, tag, build=build, mapped=bool(missing), build_args=build_args
    )
    return None, tag, notes


def load_harbor(root: str | Path, **options: Any) -> LoadedTasks:
    """Every Harbor task folder under ``root`` (folders with a ``task.toml``), in name order.

    A task that cannot run here is left out with its reason (``result.problems``, and a
    warning); when none can, :class:`~multiturn_envs.envs.terminal.loading.NoTasksLoaded`
    says why for each. ``options`` go to :func:`load_harbor_task`."""
    return load_all(root, "task.toml", lambda f: load_harbor_task(f, **options), "Harbor")
