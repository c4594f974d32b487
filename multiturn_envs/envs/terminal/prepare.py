"""Preparing a task to run: its image, its layout, its users and environments, and its
starting state, made once per task and kept by the env.

The starting state is the content of the task's writable directories: from its image (built
by ``docker build`` when needed), or built by the env itself when the task's Dockerfile is
light (:mod:`.dockerfile`: its steps run in a hardened container of the base image), then the
task's ``files`` and ``setup`` (tasks made in Python). Each later episode starts on a fresh
container with those trees put in.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import stat
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multiturn_envs.envs.terminal.loading import MAX_TASK_DEPTH, MAX_TASK_ENTRIES, task_folder
from multiturn_envs.envs.terminal.tasks import SOLUTION_DIR, TerminalTask
from multiturn_envs.sandbox.checker import CheckJob
from multiturn_envs.sandbox.dockerfile import (
    BuildPlan,
    Instruction,
    copy_args,
    parse_env,
    resolve_base,
    substitute,
)
from multiturn_envs.sandbox.provider import Box, ResourceLimits
from multiturn_envs.sandbox.tar_files import files_tar
from multiturn_envs.sandbox.task_box import CHECK_HOME, TESTS_DIR, agent_spec
from multiturn_envs.sandbox.task_images import (
    BUILD_TIMEOUT_S,
    OFFLINE_BIN,
    OFFLINE_DIR,
    ImageConfig,
    build_image,
    image_config,
    image_exists,
    image_tar_of,
    read_image_file,
    resolve_user,
    top_level_dirs,
)
from multiturn_envs.sandbox.trees import (
    Layout,
    WritableDir,
    content_digest,
    put_trees,
    read_state,
    top_level_writable,
    top_of,
)

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
SETUP_TIMEOUT_S = BUILD_TIMEOUT_S
"""The longest a task's setup script or a light build's ``RUN`` step may take: as long as a
``docker build`` (:data:`~multiturn_envs.sandbox.task_images.BUILD_TIMEOUT_S`)."""
CHECK_ENV = {
    "PATH": SYSTEM_PATH,
    "HOME": CHECK_HOME,
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "TEST_DIR": TESTS_DIR,
    "PYTHONDONTWRITEBYTECODE": "1",
    # the repository is the agent's: its hooks, monitor and config must not decide a check
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_COUNT": "4",
    "GIT_CONFIG_KEY_0": "core.fsmonitor",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "core.hooksPath",
    "GIT_CONFIG_VALUE_1": "/dev/null",
    "GIT_CONFIG_KEY_2": "safe.directory",
    "GIT_CONFIG_VALUE_2": "*",
    "GIT_CONFIG_KEY_3": "core.untrackedCache",
    "GIT_CONFIG_VALUE_3": "false",
}
"""The environment of ``exit-status`` checks (see :class:`~.checker.Check`)."""


class LightBuildFailed(RuntimeError):
    """A light build's step could not run on the base image's container."""


@dataclass
class Prepared:
    """A task ready to run (see the module docstring)."""

    task_id: str
    layout: Layout
    agent_user: str
    root: bool
    workdir: str
    agent_env: dict[str, str]
    job: CheckJob
    initial: dict[str, bytes]
    digest: str
    notes: list[str] = field(default_factory=list)


@dataclass
class _Stage:
    """The image configuration a build has reached (a light build changes it step by step)."""

    workdir: str
    env: dict[str, str]
    user: str
    args: dict[str, str] = field(default_factory=dict)


def _config_stage(config: ImageConfig) -> _Stage:
    return _Stage(config.workdir or "/", dict(config.env), config.user or "0:0")


def _under(path: str, roots: list[str]) -> str | None:
    for root in sorted(roots, key=len, reverse=True):
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return root
    return None


class Preparer:
    """Prepares tasks for one env (see the module docstring).

    Args:
        engine: the engine tasks are prepared on (their images are built and inspected there:
            this machine's, :class:`~multiturn_envs.sandbox.docker_engine.DockerEngine`).
        limits: the limits of a light build's box.
        default_image: the terminal image (also the ``BASE`` build argument).
        size_mb: the size of each writable directory (and the cap of a state's archive).
        check_timeout_s: the limit of one check when the task gives none.
    """

    def __init__(
        self,
        engine: Any,
        limits: ResourceLimits,
        default_image: str,
        size_mb: int,
        check_timeout_s: float,
    ) -> None:
        self.engine = engine
        self.client = engine.client
        self.limits = limits
        self.default_image = default_image
        self.size_mb = int(size_mb)
        self.check_timeout_s = float(check_timeout_s)

    @property
    def cap_bytes(self) -> int:
        return self.size_mb << 20

    # ------------------------------------------------------------------ the image
    def _image(self, task: TerminalTask, notes: list[str]) -> tuple[str, BuildPlan | None]:
        """The image to start from, and the light plan still to run on it (if any)."""
        plan = task.build
        if plan is None:
            return task.image or self.default_image, None
        build_args = {"BASE": self.default_image, **plan.build_args}
        tag = task.image or ""
        base = resolve_base(list(plan.steps), build_args)
        if plan.light and image_exists(base):
            return base, plan
        if tag and image_exists(tag):
            return tag, None
        if not tag:
            raise RuntimeError(f"task {task.task_id}: no image to build into (image=None)")
        build_image(Path(plan.context), plan.dockerfile, tag, build_args=build_args)
        notes.append(f"image built with docker build ({plan.why_not_light})")
        return tag, None

    # ------------------------------------------------------------------ layout and users
    def _user(self, image: str, user: str, default: str = "0:0") -> str:
        if not user:
            user = default or "0:0"
        uid, _, gid = user.partition(":")
        if uid.isdigit() and (gid.isdigit() or not gid):
            return f"{uid}:{gid or uid}"
        return resolve_user(self.client, image, user)

    def _layout(self, task: TerminalTask, image: str, workdir: str, root: bool) -> Layout:
        if task.writable is not None:
            paths = list(task.writable)
        elif root:
            paths = top_level_writable(top_level_dirs(self.client, image))
        else:
            paths = [workdir, "/tmp"]
        if _under(workdir, paths) is None:
            paths.append(workdir)
        if task.solution_files and _under(SOLUTION_DIR, paths) is None:
            paths.append(SOLUTION_DIR)  # empty: the reference solution's first turn fills it
        paths = sorted(set(paths))
        return Layout(image, tuple(WritableDir(p) for p in paths), self.size_mb)

    def _with_tops(self, layout: Layout, trees: Mapping[str, bytes], owner: str) -> Layout:
        """The layout with each directory's top (owner, mode) as the trees have it; one the
        image lacks belongs to ``owner``."""
        uid, _, gid = owner.partition(":")
        tops = []
        for w in layout.writable:
            top = top_of(trees[w.path]) if trees.get(w.path) else None
            if top is None:
                mode = 0o1777 if w.path == "/tmp" else 0o755
                tops.append(WritableDir(w.path, int(uid), int(gid), mode))
            else:
                tops.append(WritableDir(w.path, top[0], top[1], top[2]))
        return Layout(layout.image, tuple(tops), layout.size_mb)

    # ------------------------------------------------------------------ preparing
    def prepare(self, task: TerminalTask) -> Prepared:
        notes = list(task.notes)
        image, light = self._image(task, notes)
        if light is not None and task.image:
            try:
                return self._prepare_on(task, image, light, notes)
            except LightBuildFailed as exc:  # docker build is the reference: its verdict
                build_args = {"BASE": self.default_image, **light.build_args}
                if not image_exists(task.image):
                    build_image(
                        Path(light.context), light.dockerfile, task.image, build_args=build_args
                    )
                notes.append(f"the light build failed ({exc}); image built with docker build")
                image, light = task.image, None
        return self._prepare_on(task, image, light, notes)

    def _prepare_on(
        self, task: TerminalTask, image: str, light: BuildPlan | None, notes: list[str]
    ) -> Prepared:
        stage = _config_stage(image_config(self.client, image))
        default_user = _light_last(light, "USER", stage.user) if light is not None else stage.user
        agent_user = self._user(image, task.agent_user, default_user)
        root = agent_user.partition(":")[0] == "0"
        workdir = task.workdir or stage.workdir or "/"
        if light is not None:  # the light build decides the final working directory
            workdir = task.workdir or _light_workdir(light, stage.workdir or "/")
        layout = self._layout(task, image, workdir, root)
        trees = image_tar_of(self.client, image, layout.paths, self.cap_bytes)
        layout = self._with_tops(layout, trees, agent_user)
        if light is not None or task.files or task.setup.strip():
            trees, stage = self._build_state(task, layout, trees, stage, light, agent_user, workdir)
            layout = self._with_tops(layout, trees, agent_user)
            if light is not None:
                workdir = task.workdir or stage.workdir or "/"
        agent_env = self._agent_env(stage, agent_user, root, workdir, task)
        job = self._job(task, image, stage, workdir)
        digest = _trees_digest(trees)
        return Prepared(
            task.task_id, layout, agent_user, root, workdir, agent_env, job, trees, digest, notes
        )

    def _build_state(
        self,
        task: TerminalTask,
        layout: Layout,
        trees: dict[str, bytes],
        stage: _Stage,
        light: BuildPlan | None,
        agent_user: str,
        workdir: str,
    ) -> tuple[dict[str, bytes], _Stage]:
        box = self.engine.create(agent_spec(layout, True, self.limits))
        try:
            put_trees(box, trees, root=True)
            if light is not None:
                try:
                    stage = self._light_steps(box, layout, light, stage)
                except LightBuildFailed:
                    raise
                except Exception as exc:  # the engine refused a step: the same verdict
                    raise LightBuildFailed(f"{type(exc).__name__}: {exc}") from exc
            if task.files:
                if _under(workdir, list(layout.paths)) is None:
                    raise RuntimeError(f"task {task.task_id}: {workdir} is not writable")
                uid = int(agent_user.partition(":")[0])
                box.exec(["mkdir", "-p", workdir], user="0:0")
                box.put_archive(workdir, files_tar(dict(task.files), uid=uid))
            if task.setup.strip():
                env = self._agent_env(stage, agent_user, agent_user.startswith("0:"), workdir, task)
                done = box.exec(
                    ["bash", "-c", task.setup],
                    user=agent_user,
                    workdir=workdir,
                    environment=env,
                    timeout_s=SETUP_TIMEOUT_S,
                )
                if done.exit_code != 0:
                    raise RuntimeError(
                        f"the setup of task {task.task_id} failed ({done.exit_code}): "
                        f"{done.output[-500:]!r}"
                    )
            state = read_state(box, layout.paths, self.cap_bytes)
            try:
                if state.too_large is not None:
                    raise RuntimeError(f"task {task.task_id}: {state.too_large}")
                return state.trees(), stage
            finally:
                state.close()
        finally:
            box.close()

    def _light_steps(self, box: Box, layout: Layout, plan: BuildPlan, stage: _Stage) -> _Stage:
        build_args = {"BASE": self.default_image, **plan.build_args}
        stage = _Stage(stage.workdir, dict(stage.env), stage.user, {})
        started = False
        for step in plan.steps:
            if step.keyword == "FROM":
                started = True
                continue
            if step.keyword == "ARG":
                name, _, default = step.args.partition("=")
                name = name.strip()
                stage.args[name] = build_args.get(name, default.strip().strip('"'))
                continue
            if not started:
                continue
            variables = {**stage.args, **stage.env}
            if step.keyword == "ENV":
                for name, value in parse_env(step.args).items():
                    stage.env[name] = substitute(value, variables)
            elif step.keyword == "WORKDIR":
                path = substitute(step.args.strip(), variables)
                stage.workdir = posixpath.normpath(posixpath.join(stage.workdir, path))
                if box.exec(["mkdir", "-p", stage.workdir], user="0:0").exit_code != 0:
                    raise LightBuildFailed(f"line {step.line}: WORKDIR {stage.workdir}")
            elif step.keyword == "USER":
                stage.user = substitute(step.args.strip(), variables)
            elif step.keyword in ("COPY", "ADD"):
                self._light_copy(box, layout, plan, step, stage, variables)
            elif step.keyword == "RUN":
                self._light_run(box, layout, step, stage)
        return stage

    def _light_copy(
        self,
        box: Box,
        layout: Layout,
        plan: BuildPlan,
        step: Instruction,
        stage: _Stage,
        variables: Mapping[str, str],
    ) -> None:
        flags, sources, dest = copy_args(substitute(step.args, variables))
        dest_path = posixpath.normpath(posixpath.join(stage.workdir, dest))
        into_dir = dest.endswith("/") or len(sources) > 1
        if not into_dir:  # a file copied to an existing directory goes into it, as in Docker
            into_dir = box.exec(["test", "-d", dest_path], user="0:0").exit_code == 0
        root = _under(dest_path, list(layout.paths))
        if root is None:
            raise LightBuildFailed(f"line {step.line}: {dest_path} is not writable here")
        owner = self._user(layout.image, flags["chown"]) if "chown" in flags else "0:0"
        uid, _, gid = owner.partition(":")
        chmod = int(flags["chmod"], 8) if flags.get("chmod") else None
        # the build context is someone else's folder: read beneath it (a link leaving it, a
        # FIFO or device is refused), walked within the task-folder bounds
        files = task_folder(plan.context)
        entries: list[tuple[str, str, str]] = []  # (target, path in the context, kind)
        for source in sources:
            found = files.stat(source)
            if found is None:
                raise LightBuildFailed(f"line {step.line}: {source} is not in the build context")
            if stat.S_ISDIR(found.st_mode):  # its contents go into dest
                base = source.strip("/")
                for entry in files.walk(
                    source, max_entries=MAX_TASK_ENTRIES, max_depth=MAX_TASK_DEPTH
                ):
                    inner = f"{base}/{entry.path}" if base else entry.path
                    entries.append((posixpath.join(dest_path, entry.path), inner, entry.kind))
                entries.append((dest_path, source, "dir"))
            else:
                name = posixpath.basename(source.rstrip("/"))
                target = posixpath.join(dest_path, name) if into_dir else dest_path
                entries.append((target, source, "file"))
        buf = io.BytesIO()
        made: set[str] = set()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for target, item, kind in sorted(entries, key=lambda e: e[0]):
                rel = posixpath.relpath(target, root)
                parts = rel.split("/")
                for i in range(1, len(parts)):  # missing parents: root's, 0755
                    folder = "/".join(parts[:i])
                    if folder not in made and folder != ".":
                        made.add(folder)
                        info = tarfile.TarInfo(folder)
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(info)
                if rel == "." or rel in made:
                    continue
                made.add(rel)
                info = tarfile.TarInfo(rel)
                info.uid, info.gid, info.uname, info.gname = int(uid), int(gid), "", ""
                if kind == "link":  # copied as the link it is, as docker build does
                    info.type, info.mode = tarfile.SYMTYPE, 0o777
                    info.linkname = files.readlink(item)
                    tar.addfile(info)
                elif kind == "dir":
                    found = files.stat(item)
                    info.type = tarfile.DIRTYPE
                    info.mode = stat.S_IMODE(found.st_mode) if found else 0o755
                    info.mode = chmod if chmod is not None else info.mode
                    tar.addfile(info)
                else:  # a file (a FIFO, socket or device is refused by open)
                    with files.open(item) as handle:
                        status = os.fstat(handle.fileno())
                        info.size, info.mtime = status.st_size, int(status.st_mtime)
                        info.mode = chmod if chmod is not None else stat.S_IMODE(status.st_mode)
                        tar.addfile(info, handle)
        try:
            box.put_archive(root, buf.getvalue())
        except RuntimeError as exc:
            raise LightBuildFailed(f"line {step.line}: put_archive into {root} failed") from exc

    def _light_run(self, box: Box, layout: Layout, step: Instruction, stage: _Stage) -> None:
        text = step.args.strip()
        if text.startswith("["):
            try:
                command = [str(w) for w in json.loads(text)]
            except ValueError:
                command = ["/bin/sh", "-c", text]
        else:
            command = ["/bin/sh", "-c", text]
        env = {**stage.args, **stage.env}
        user = self._user(layout.image, stage.user)
        done = box.exec(
            command, user=user, workdir=stage.workdir, environment=env, timeout_s=SETUP_TIMEOUT_S
        )
        if done.exit_code != 0:
            tail = done.output.decode("utf-8", "replace").strip().splitlines()[-3:]
            code = "timed out" if done.timed_out else done.exit_code
            raise LightBuildFailed(f"line {step.line}: RUN failed ({code}): {' | '.join(tail)}")

    # ------------------------------------------------------------------ environments
    def _agent_env(
        self, stage: _Stage, user: str, root: bool, workdir: str, task: TerminalTask
    ) -> dict[str, str]:
        env = dict(stage.env)
        path = [p for p in env.get("PATH", SYSTEM_PATH).split(":") if p and p != OFFLINE_BIN]
        env.update(
            {
                "PATH": ":".join(path) or SYSTEM_PATH,
                "HOME": "/root" if root else workdir,
                "HOSTNAME": "sandbox",
                "USER": "root" if root else "agent",
                "LANG": env.get("LANG", "C.UTF-8"),
                "TERM": "dumb",
                "PAGER": "cat",
                "GIT_PAGER": "cat",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        env.update(task.environment)
        return env

    def _job(self, task: TerminalTask, image: str, stage: _Stage, workdir: str) -> CheckJob:
        user = self._user(image, task.verifier_user, stage.user or "0:0")
        timeout = task.check_timeout_s or self.check_timeout_s
        if task.verdict == "exit-status":
            env = {**CHECK_ENV, **task.verifier_environment}
        else:
            root = user.partition(":")[0] == "0"
            env = dict(stage.env)
            path = env.get("PATH", SYSTEM_PATH)
            if read_image_file(self.client, image, f"{OFFLINE_DIR}/lib.sh") is not None:
                path = f"{OFFLINE_BIN}:{path}"
            env.update(
                {
                    "PATH": path,
                    "HOME": "/root" if root else CHECK_HOME,
                    "TEST_DIR": TESTS_DIR,
                    "LANG": env.get("LANG", "C.UTF-8"),
                    "TERM": "dumb",
                }
            )
            env.update(task.verifier_environment)
        return CheckJob(
            task.checks, task.verdict, user, workdir, env, dict(task.tests), float(timeout)
        )


def _light_last(plan: BuildPlan, keyword: str, default: str) -> str:
    """The argument of the plan's last ``keyword`` step (``USER``), or ``default``."""
    value = default
    for step in plan.steps:
        if step.keyword == keyword:
            value = step.args.strip()
    return value


def _light_workdir(plan: BuildPlan, start: str) -> str:
    workdir = start
    for step in plan.steps:
        if step.keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, step.args.strip()))
    return workdir


def _trees_digest(trees: Mapping[str, bytes]) -> str:
    return content_digest([(path, io.BytesIO(trees[path]), True) for path in sorted(trees)])
