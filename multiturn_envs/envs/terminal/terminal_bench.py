"""Load Terminal-Bench 1 task folders, to run them as Terminal-Bench does.

A Terminal-Bench (1.x) task folder holds ``task.yaml`` (``instruction``, ``difficulty``,
``parser_name``, ``max_test_timeout_sec``, ...), a ``Dockerfile`` and a ``docker-compose.yaml``
that build and start the task's container, ``solution.sh`` (or ``solution.yaml``, keystroke
steps), ``run-tests.sh`` and ``tests/``. This module turns one into a
:class:`~multiturn_envs.envs.terminal.tasks.TerminalTask` that runs the way Terminal-Bench's
harness runs it (``terminal_bench/harness/harness.py``):

* the container: the image the task's Dockerfile builds, with the compose service's
  ``environment`` (``TEST_DIR=/tests``), ``working_dir`` and ``user``; the agent works as that
  user (root unless the image or compose says otherwise) in the image's ``WORKDIR``, and can
  write everywhere but the system directories (``/usr``...);
* the tests: ``run-tests.sh`` and the files of ``tests/`` copied INTO ``/tests``
  (``$TEST_DIR``), then ``bash /tests/run-tests.sh`` as root from the working directory, with a
  limit of ``max_test_timeout_sec``;
* the verdict: Terminal-Bench's pytest parser on the output (the ``-rA`` "short test summary
  info"; :mod:`.verdicts`); resolved when every test passes;
* the reference solution: ``solution.sh`` as one command, or the ``command`` of each
  ``solution.yaml`` step, one per turn.

Offline (no image registry, no package index): when the Dockerfile's base image is not in the
local engine, the image is built with its ``FROM`` mapped onto the terminal image (``map_base``,
default on), whose offline stand-ins answer the build's ``apt-get``/``pip`` from what the image
has and serve the test scripts' ``uv``/``uvx``/``pip``/``curl ... | sh`` with the image's pytest;
each such deviation is in the task's ``notes``. A task that cannot run here (its build needs
the network, several compose services, another parser) raises
:class:`~multiturn_envs.errors.TaskUnavailable` with the cause.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from multiturn_envs.envs.terminal.loading import (
    DOWNLOADS,
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
    task_folder,
)
from multiturn_envs.envs.terminal.parsing import MAX_COMMAND_CHARS
from multiturn_envs.envs.terminal.tasks import TerminalTask
from multiturn_envs.errors import TaskUnavailable, UntrustedInputError
from multiturn_envs.sandbox.checker import Check
from multiturn_envs.sandbox.task_box import TESTS_DIR
from multiturn_envs.untrusted import Fields, Folder

RUN_TESTS = "run-tests.sh"
AGENT_TIMEOUT_S = 360.0
TEST_TIMEOUT_S = 60.0
"""Terminal-Bench's defaults of ``max_agent_timeout_sec`` and ``max_test_timeout_sec``."""
_TEST_TOOLS = re.compile(r"\b(uv |uvx|pip3? install|curl|apt-get)")


def _solution(files: Folder) -> tuple[tuple[str, ...], dict[str, bytes], list[str]]:
    """The reference solution's turns (``solution.sh`` as one command, as Terminal-Bench types
    it; one longer than a command is uploaded and run as a script), the files those turns
    upload, and a note on how."""
    if files.is_file("solution.sh"):
        script = files.read_text("solution.sh", max_bytes=MAX_SCRIPT_BYTES)
        if len(script) <= MAX_COMMAND_CHARS:
            return (script,), {}, []
        return script_solution("solution.sh", script, {})
    if files.is_file("solution.yaml"):
        steps = files.read_yaml("solution.yaml", max_bytes=MAX_META_BYTES) or []
        where = files.name("solution.yaml")
        if not isinstance(steps, list):
            raise UntrustedInputError(f"{where}: not a list of steps")
        commands = []
        for i, step in enumerate(steps):
            if not isinstance(step, dict):
                continue
            command = Fields(step, where=where, prefix=f"step {i + 1}: ").text(
                "command", max_chars=MAX_SCRIPT_BYTES
            )
            if command:
                commands.append(command.rstrip("\n"))
        if commands:
            return tuple(commands), {}, []
    raise ValueError(f"{files.where}: no solution.sh or solution.yaml with commands")


def _compose_service(files: Folder, notes: list[str]) -> Fields:
    """The agent's service of ``docker-compose.yaml`` (empty without one)."""
    name = "docker-compose.yaml" if files.exists("docker-compose.yaml") else "docker-compose.yml"
    if not files.is_file(name):
        return Fields({}, where=files.name(name))
    where = files.name(name)
    compose = Fields(files.read_yaml(name, max_bytes=MAX_META_BYTES), where=where)
    services = compose.get("services") or {}
    if not isinstance(services, dict) or not services:
        return Fields({}, where=where)
    chosen = "client" if "client" in services else str(next(iter(services)))
    if len(services) > 1:
        others = ", ".join(str(s) for s in services if s != chosen)[:500]
        raise TaskUnavailable(
            f"needs other compose services ({others}); this env runs one", "services"
        )
    service = compose.table("services").table(chosen)
    for key in ("privileged", "cap_add", "devices", "network_mode", "ports"):
        if service.get(key):
            notes.append(f"compose {key} ignored (the env's hardening applies)")
    return service


def _compose_environment(service: Fields) -> dict[str, str]:
    """The service's variables, Terminal-Bench's placeholders filled in (``TEST_DIR``)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = {}
        for item in raw:
            if not isinstance(item, str | int | float):
                raise UntrustedInputError(
                    f"{service.where}: {service.prefix}environment holds {type(item).__name__}, "
                    "not NAME=value"
                )
            name, _, value = str(item).partition("=")
            pairs[name] = value
        raw = pairs
    items = Fields({"environment": raw}, where=service.where, prefix=service.prefix).text_map(
        "environment"
    )
    env: dict[str, str] = {}
    for name, text in items.items():
        if "T_BENCH_TEST_DIR" in text:
            text = text.replace("${T_BENCH_TEST_DIR}", TESTS_DIR).replace(
                "$T_BENCH_TEST_DIR", TESTS_DIR
            )
        if "${" in text:  # another of the harness's placeholders: nothing to fill in here
            continue
        env[name] = text
    env.setdefault("TEST_DIR", TESTS_DIR)
    return env


def load_terminal_bench_task(
    folder: str | Path,
    *,
    image: str | None = None,
    build: bool = True,
    map_base: bool = True,
) -> TerminalTask:
    """One Terminal-Bench 1 task folder as a :class:`TerminalTask` (see the module docstring).

    Args:
        image: an image that already holds the task's environment (built where its base can
            be pulled, brought with ``docker save``/``docker load``): no build here.
        build: build the image when it is not in the local engine (``False``: say so).
        map_base: build it with its ``FROM`` mapped onto the terminal image when the base
            cannot be pulled (the task's notes say what that changes).

    The folder is read as untrusted (:func:`~.loading.task_folder`: no link out of it, every
    file within its byte cap, fields typed and ranged). Raises ``ValueError`` (an
    :class:`~multiturn_envs.errors.UntrustedInputError` for a refused file or field) for a
    malformed folder and :class:`~multiturn_envs.errors.TaskUnavailable` with
    the cause for one that cannot run here.
    """
    path = Path(folder)
    files = task_folder(path)
    if not files.is_file("task.yaml"):
        raise ValueError(f"{path}: not a Terminal-Bench task (no task.yaml)")
    where = files.name("task.yaml")
    meta = Fields(files.read_yaml("task.yaml", max_bytes=MAX_META_BYTES), where=where)
    instruction = meta.text("instruction", max_chars=MAX_INSTRUCTION_BYTES)
    if not instruction.strip():
        raise ValueError(f"{where}: 'instruction' is missing")
    parser = meta.text("parser_name", default="pytest", max_chars=MAX_FIELD_CHARS) or "pytest"
    if parser != "pytest":
        raise TaskUnavailable(f"its tests are read by the {parser!r} parser; only pytest here")
    timeout = meta.number(
        "max_test_timeout_sec",
        default=TEST_TIMEOUT_S,
        minimum=0.0,
        maximum=MAX_TIMEOUT_S,
        exclusive_minimum=True,
    )
    agent_timeout = meta.number(
        "max_agent_timeout_sec",
        default=AGENT_TIMEOUT_S,
        minimum=0.0,
        maximum=MAX_TIMEOUT_S,
        exclusive_minimum=True,
    )
    category = meta.text("category", max_chars=MAX_FIELD_CHARS) or "terminal-bench"
    if not files.is_file(RUN_TESTS):
        raise ValueError(f"{path}: {RUN_TESTS} is missing")
    notes: list[str] = []
    service = _compose_service(files, notes)
    # Terminal-Bench copies run-tests.sh and the CONTENTS of tests/ into $TEST_DIR
    tests = {RUN_TESTS: files.read_bytes(RUN_TESTS, max_bytes=MAX_TEST_FILE_BYTES)}
    if files.is_dir("tests"):
        tests.update(
            files.read_tree(
                "tests",
                max_file_bytes=MAX_TEST_FILE_BYTES,
                max_total_bytes=MAX_TESTS_BYTES - len(tests[RUN_TESTS]),
                max_entries=MAX_TASK_ENTRIES,
                max_depth=MAX_TASK_DEPTH,
            )
        )
    test_scripts = "\n".join(
        data.decode("utf-8", "replace") for name, data in tests.items() if name.endswith(".sh")
    )
    if _TEST_TOOLS.search(test_scripts):
        notes.append(
            "the test scripts install uv/pytest from the network: offline, the terminal image's "
            "stand-ins serve them with its own pytest (7.2; no files written in the working "
            "directory by `uv init`)"
        )
    solution, solution_files, more = _solution(files)
    notes += more
    if DOWNLOADS.search("\n".join(solution)):
        notes.append("the reference solution downloads something: offline it cannot pass")
    if meta.get("run_tests_in_same_shell"):
        notes.append("run_tests_in_same_shell: the tests run in a fresh process here")
    notes.append(
        "max_agent_timeout_sec bounds the reference solution in verify; an episode is bounded "
        "by its turns and each command by command_timeout_s"
    )
    workdir = service.text("working_dir", max_chars=MAX_FIELD_CHARS)
    agent_user = service.text("user", max_chars=MAX_FIELD_CHARS, scalars=True)
    env = _compose_environment(service)
    task_image = image
    if task_image is None:
        context, dockerfile = _build_context(files, service)
        task_image, more = _image(files, context, dockerfile, build, map_base)
        notes += more
    return TerminalTask(
        task_id=f"tb/{path.name}",
        instruction=instruction,
        checks=(Check(RUN_TESTS, f"bash {TESTS_DIR}/{RUN_TESTS}"),),
        solution=solution,
        solution_files=solution_files,
        category=category,
        difficulty=difficulty_of(meta.get("difficulty")),
        image=task_image,
        tests=tests,
        verdict="pytest-summary",
        check_timeout_s=timeout,
        agent_timeout_s=agent_timeout,
        workdir=workdir or None,
        agent_user=agent_user,
        verifier_user="0:0",
        environment=env,
        verifier_environment=env,
        notes=tuple(notes),
        source=str(path),
    )


def _build_context(files: Folder, service: Fields) -> tuple[Folder, str]:
    """The build context (a folder beneath the task folder) and the Dockerfile's path from the
    task folder (``docker-compose.yaml``'s ``build``; neither may leave the task folder)."""
    build = service.get("build") or {}
    if isinstance(build, str):
        build = {"context": build}
    fields = Fields(build, where=service.where, prefix=f"{service.prefix}build.")
    context_rel = fields.text("context", default=".", max_chars=MAX_FIELD_CHARS) or "."
    name = fields.text("dockerfile", default="Dockerfile", max_chars=MAX_FIELD_CHARS)
    context = files.sub(context_rel)  # refuses a context that leaves the task folder
    dockerfile = posixpath.join(context_rel, name or "Dockerfile")  # absolute stays absolute
    if not files.is_file(dockerfile):  # refuses a Dockerfile path that leaves it
        raise ValueError(f"{files.where}: no Dockerfile (and no image given: image=...)")
    return context, dockerfile


def _image(
    files: Folder, context: Folder, dockerfile: str, build: bool, map_base: bool
) -> tuple[str, list[str]]:
    """The task's image tag, built when missing (see :func:`load_terminal_bench_task`)."""
    from multiturn_envs.sandbox.dockerfile import base_images
    from multiturn_envs.sandbox.task_images import (
        ImageUnavailable,
        content_tag,
        ensure_task_image,
        image_exists,
        image_id,
        mapped_dockerfile,
    )
    from multiturn_envs.sandbox.terminal_image import terminal_image

    text = files.read_text(dockerfile, max_bytes=MAX_SCRIPT_BYTES)
    notes: list[str] = []
    missing = [b for b in base_images(text) if b and not image_exists(b)]
    mapped = bool(missing)
    if missing:
        if not map_base:
            raise ImageUnavailable(
                f"its base image {', '.join(missing)} is not in the local engine and cannot be "
                f"pulled here: build it where it can (docker build -t <tag> {files.root}), bring "
                "it with docker save | docker load and pass image=<tag>; or allow map_base",
                "base",
            )
        text, replaced = mapped_dockerfile(text, terminal_image())
        notes.append(
            f"FROM {', '.join(replaced)} mapped onto {terminal_image()} (Debian 12, Python "
            "3.11, pytest 7.2): the base cannot be pulled here"
        )
    # a mapped image is rebuilt when the terminal image changes; the hash walks the whole task
    # folder (links listed, not followed; a link leaving it refuses the task)
    extra = image_id(terminal_image()) if mapped else ""
    tag = content_tag(f"mte-tb-{files.root.name}", files.root, extra)
    notes += ensure_task_image(context.root, text, tag, build=build, mapped=mapped)
    return tag, notes


def load_terminal_bench(root: str | Path, **options: Any) -> LoadedTasks:
    """Every Terminal-Bench 1 task folder under ``root`` (folders with a ``task.yaml``), in
    name order.

    A task that cannot run here is left out with its cause (``result.problems``, and a
    warning); when none can, :class:`~multiturn_envs.envs.terminal.loading.NoTasksLoaded`
    lists every cause. ``options`` go to :func:`load_terminal_bench_task`."""
    return load_all(
        root, "task.yaml", lambda f: load_terminal_bench_task(f, **options), "Terminal-Bench"
    )
