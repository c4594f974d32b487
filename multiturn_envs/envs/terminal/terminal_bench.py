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
:class:`~multiturn_envs.envs.terminal.loading.TaskUnavailable` with the cause.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from multiturn_envs.envs.terminal.checker import Check
from multiturn_envs.envs.terminal.containers import TESTS_DIR
from multiturn_envs.envs.terminal.loading import (
    DOWNLOADS,
    LoadedTasks,
    TaskUnavailable,
    difficulty_of,
    load_all,
)
from multiturn_envs.envs.terminal.tasks import TerminalTask

RUN_TESTS = "run-tests.sh"
AGENT_TIMEOUT_S = 360.0
TEST_TIMEOUT_S = 60.0
"""Terminal-Bench's defaults of ``max_agent_timeout_sec`` and ``max_test_timeout_sec``."""
_TEST_TOOLS = re.compile(r"\b(uv |uvx|pip3? install|curl|apt-get)")


def _read_yaml(path: Path) -> Any:
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml ships with the [terminal] extra
        raise ImportError(
            "reading Terminal-Bench tasks needs PyYAML: pip install 'multiturn-envs[terminal]'"
        ) from exc
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({exc})") from exc


def _seconds(meta: dict[str, Any], key: str, default: float) -> float:
    """``task.yaml``'s ``key`` as seconds (its default when absent or empty); a value that is
    not a finite positive number is refused."""
    value = meta.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e7:
        raise ValueError(f"task.yaml: {key} must be seconds > 0, not {value!r}")
    return float(value)


def _solution(folder: Path) -> tuple[str, ...]:
    script = folder / "solution.sh"
    if script.is_file():
        return (script.read_text(encoding="utf-8"),)
    steps_file = folder / "solution.yaml"
    if steps_file.is_file():
        steps = _read_yaml(steps_file) or []
        if not isinstance(steps, list):
            raise ValueError(f"{steps_file}: not a list of steps")
        commands = tuple(
            str(step["command"]).rstrip("\n")
            for step in steps
            if isinstance(step, dict) and step.get("command")
        )
        if commands:
            return commands
    raise ValueError(f"{folder}: no solution.sh or solution.yaml with commands")


def _compose_service(folder: Path, notes: list[str]) -> dict[str, Any]:
    """The agent's service of ``docker-compose.yaml`` (``{}`` without one)."""
    path = folder / "docker-compose.yaml"
    if not path.is_file():
        path = folder / "docker-compose.yml"
    if not path.is_file():
        return {}
    compose = _read_yaml(path) or {}
    services = compose.get("services") or {}
    if not isinstance(services, dict) or not services:
        return {}
    name = "client" if "client" in services else next(iter(services))
    if len(services) > 1:
        others = ", ".join(s for s in services if s != name)
        raise TaskUnavailable(
            f"needs other compose services ({others}); this env runs one", "services"
        )
    service = services[name] or {}
    for key in ("privileged", "cap_add", "devices", "network_mode", "ports"):
        if service.get(key):
            notes.append(f"compose {key} ignored (the env's hardening applies)")
    return dict(service)


def _compose_environment(service: dict[str, Any]) -> dict[str, str]:
    """The service's variables, Terminal-Bench's placeholders filled in (``TEST_DIR``)."""
    raw = service.get("environment") or {}
    items = raw.items() if isinstance(raw, dict) else (str(e).partition("=")[::2] for e in raw)
    env: dict[str, str] = {}
    for name, value in items:
        text = str(value)
        if "T_BENCH_TEST_DIR" in text:
            text = text.replace("${T_BENCH_TEST_DIR}", TESTS_DIR).replace(
                "$T_BENCH_TEST_DIR", TESTS_DIR
            )
        if "${" in text:  # another of the harness's placeholders: nothing to fill in here
            continue
        env[str(name)] = text
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

    Raises ``ValueError`` for a malformed folder and
    :class:`~multiturn_envs.envs.terminal.loading.TaskUnavailable` with the cause for one that
    cannot run here.
    """
    path = Path(folder)
    meta_file = path / "task.yaml"
    if not meta_file.is_file():
        raise ValueError(f"{path}: not a Terminal-Bench task (no task.yaml)")
    meta = _read_yaml(meta_file) or {}
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_file}: not a mapping")
    instruction = meta.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"{meta_file}: 'instruction' is missing")
    parser = str(meta.get("parser_name") or "pytest")
    if parser != "pytest":
        raise TaskUnavailable(f"its tests are read by the {parser!r} parser; only pytest here")
    run_tests = path / RUN_TESTS
    if not run_tests.is_file():
        raise ValueError(f"{path}: {RUN_TESTS} is missing")
    notes: list[str] = []
    service = _compose_service(path, notes)
    # Terminal-Bench copies run-tests.sh and the CONTENTS of tests/ into $TEST_DIR
    tests = {RUN_TESTS: run_tests.read_bytes()}
    tests_dir = path / "tests"
    if tests_dir.is_dir():
        for file in sorted(tests_dir.rglob("*")):
            if file.is_file():
                tests[file.relative_to(tests_dir).as_posix()] = file.read_bytes()
    test_scripts = "\n".join(
        data.decode("utf-8", "replace") for name, data in tests.items() if name.endswith(".sh")
    )
    if _TEST_TOOLS.search(test_scripts):
        notes.append(
            "the test scripts install uv/pytest from the network: offline, the terminal image's "
            "stand-ins serve them with its own pytest (7.2; no files written in the working "
            "directory by `uv init`)"
        )
    solution = _solution(path)
    if DOWNLOADS.search("\n".join(solution)):
        notes.append("the reference solution downloads something: offline it cannot pass")
    if meta.get("run_tests_in_same_shell"):
        notes.append("run_tests_in_same_shell: the tests run in a fresh process here")
    agent_timeout = _seconds(meta, "max_agent_timeout_sec", AGENT_TIMEOUT_S)
    notes.append(
        "max_agent_timeout_sec bounds the reference solution in verify; an episode is bounded "
        "by its turns and each command by command_timeout_s"
    )
    task_image = image
    if task_image is None:
        context, dockerfile = _build_context(path, service)
        task_image, more = _image(path, context, dockerfile, build, map_base)
        notes += more
    env = _compose_environment(service)
    return TerminalTask(
        task_id=f"tb/{path.name}",
        instruction=instruction,
        checks=(Check(RUN_TESTS, f"bash {TESTS_DIR}/{RUN_TESTS}"),),
        solution=solution,
        category=str(meta.get("category") or "terminal-bench"),
        difficulty=difficulty_of(meta.get("difficulty")),
        image=task_image,
        tests=tests,
        verdict="pytest-summary",
        check_timeout_s=_seconds(meta, "max_test_timeout_sec", TEST_TIMEOUT_S),
        agent_timeout_s=agent_timeout,
        workdir=str(service["working_dir"]) if service.get("working_dir") else None,
        agent_user=str(service.get("user") or ""),
        verifier_user="0:0",
        environment=env,
        verifier_environment=env,
        notes=tuple(notes),
        source=str(path),
    )


def _build_context(folder: Path, service: dict[str, Any]) -> tuple[Path, Path]:
    build = service.get("build") or {}
    if isinstance(build, str):
        build = {"context": build}
    context = (folder / str(build.get("context") or ".")).resolve()
    dockerfile = context / str(build.get("dockerfile") or "Dockerfile")
    if not context.is_relative_to(folder.resolve()):
        raise ValueError(f"{folder}: the build context leaves the task folder")
    if not dockerfile.is_file():
        raise ValueError(f"{folder}: no Dockerfile (and no image given: image=...)")
    return context, dockerfile


def _image(
    folder: Path, context: Path, dockerfile: Path, build: bool, map_base: bool
) -> tuple[str, list[str]]:
    """The task's image tag, built when missing (see :func:`load_terminal_bench_task`)."""
    from multiturn_envs.envs.terminal.dockerfile import base_images
    from multiturn_envs.envs.terminal.image import terminal_image
    from multiturn_envs.envs.terminal.task_images import (
        ImageUnavailable,
        content_tag,
        ensure_task_image,
        image_exists,
        image_id,
        mapped_dockerfile,
    )

    text = dockerfile.read_text(encoding="utf-8")
    notes: list[str] = []
    missing = [b for b in base_images(text) if b and not image_exists(b)]
    mapped = bool(missing)
    if missing:
        if not map_base:
            raise ImageUnavailable(
                f"its base image {', '.join(missing)} is not in the local engine and cannot be "
                f"pulled here: build it where it can (docker build -t <tag> {folder}), bring it "
                "with docker save | docker load and pass image=<tag>; or allow map_base",
                "base",
            )
        text, replaced = mapped_dockerfile(text, terminal_image())
        notes.append(
            f"FROM {', '.join(replaced)} mapped onto {terminal_image()} (Debian 12, Python "
            "3.11, pytest 7.2): the base cannot be pulled here"
        )
    # a mapped image is rebuilt when the terminal image changes
    tag = content_tag(f"mte-tb-{folder.name}", folder, image_id(terminal_image()) if mapped else "")
    notes += ensure_task_image(context, text, tag, build=build, mapped=mapped)
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
