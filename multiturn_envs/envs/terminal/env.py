"""The env: :class:`TerminalEnv` (``MT/Terminal-v0``)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import string
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv
from multiturn_envs.envs.terminal.checker import Checker, CheckReport, archive_bytes
from multiturn_envs.envs.terminal.image import TERMINAL_IMAGE
from multiturn_envs.envs.terminal.oracle import error_command, expert_command
from multiturn_envs.envs.terminal.parsing import (
    FORMAT_HINT,
    MAX_COMMAND_CHARS,
    ParsedAction,
    parse_action,
)
from multiturn_envs.envs.terminal.tasks import TerminalTask, files_tar, select_tasks, strip_top
from multiturn_envs.sandbox.shell_session import (
    AGENT_UID,
    CommandResult,
    ShellSession,
)
from multiturn_envs.sandbox.warm_containers import WarmContainers
from multiturn_envs.spaces import UnicodeText
from multiturn_envs.tools import Tool, ToolCall

APP = "/app"
SHELL_STATE_DIR = "/job/work/.shell"
"""The shell's saved state: on the container's ``/job`` volume (writable by the agent's uid),
where the engine can read it even when the container can no longer run a command."""
SHELL_ENV = {
    "HOME": APP,
    "HOSTNAME": "sandbox",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "USER": "agent",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "PYTHONDONTWRITEBYTECODE": "1",
}

RUN_TOOL = Tool(
    "run_command",
    "Run a shell command (or a short script: several lines run as one) in the persistent bash "
    "shell in /app and see its output, exit status and working directory.",
    {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "the command or script",
            }
        },
        "required": ["command"],
    },
)
SUBMIT_TOOL = Tool(
    "submit",
    "Declare the task done; the task's hidden tests then decide whether it is solved. This "
    "ends the episode. Call it after run_command in the same reply to run a last command "
    "first.",
    {"type": "object", "properties": {}},
)
TOOLS: tuple[Tool, ...] = (RUN_TOOL, SUBMIT_TOOL)
"""The Terminal env's actions as typed tools: run a command, submit."""


def parsed_of_calls(calls: Sequence[ToolCall]) -> ParsedAction:
    """The action of ``run_command`` and/or ``submit`` calls (in that order), or why not."""
    names = [c.name for c in calls]
    command = str(calls[0].arguments.get("command", "")) if names[0] == "run_command" else None
    if names in (["run_command"], ["run_command", "submit"]):
        if command is None or not command.strip():
            return ParsedAction(
                None, False, f"Tool call error: the command is empty. {FORMAT_HINT}"
            )
        if len(command) > MAX_COMMAND_CHARS:
            return ParsedAction(
                None,
                False,
                f"The command is longer than {MAX_COMMAND_CHARS} characters: nothing was run.",
            )
        return ParsedAction(command, len(names) == 2)
    if names == ["submit"]:
        return ParsedAction(None, True)
    return ParsedAction(
        None,
        False,
        "Tool call error: call run_command, or submit, or run_command then submit; got "
        f"{', '.join(names)}.",
    )


SYSTEM_PROMPT = """\
You are an expert Linux user solving a task in a terminal. You work in a bash shell in a
container, in /app, with no network. Each turn, send one shell command (or a short script);
you will see its output (stdout and stderr together, long output shortened in the middle), its
exit status and the working directory. The shell persists between turns: cd, variables and
background jobs carry over. Interactive programs get no terminal (stdin is empty). When the
task is done, reply `submit`; the task's hidden tests then decide whether it is solved."""


class ShellText(UnicodeText):
    """Any ``str``, like :class:`UnicodeText`; ``sample()`` leaves out ``& | $ ` ( )``.

    Random text is run by bash: ``&``, ``|`` and process substitution (``<(...)``) start
    processes that run concurrently, whose interleaved output differs from run to run, and
    ``$`` can expand ``$$``, ``$RANDOM`` or ``$SECONDS``. Without them a sampled action is
    garbage that bash runs deterministically (what ``check_env`` and PettingZoo's seed tests
    assume of a random action).
    """

    ALPHABET = "".join(
        c
        for c in string.ascii_letters + string.digits + string.punctuation + " \n"
        if c not in "&|$`()"
    )

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise NotImplementedError("ShellText.sample takes no mask or probability")
        hi = self.sample_max_length
        if self.max_length is not None:
            hi = min(hi, self.max_length)
        lo = min(self.min_length, hi)
        length = int(self.np_random.integers(lo, hi + 1))
        chars = self.np_random.choice(len(self.ALPHABET), size=length)
        return "".join(self.ALPHABET[i] for i in chars)


@dataclass
class _Episode:
    """What belongs to the running episode's container."""

    container: Any
    shell: ShellSession


def _content_digest(archive: bytes) -> str:
    """A digest of a tree's names, types, modes, links and contents (not times or owners)."""
    digest = hashlib.sha256()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
        for member in tar:
            digest.update(
                f"{member.name}\0{member.type!r}\0{member.mode:o}\0{member.linkname}\0".encode(
                    "utf-8", "surrogateescape"
                )
            )
            if member.isreg():
                handle = tar.extractfile(member)
                if handle is not None:
                    digest.update(handle.read())
    return digest.hexdigest()[:16]


def format_observation(result: CommandResult) -> str:
    """The command's output, then one status line (exit status and working directory)."""
    output = result.output
    if output and not output.endswith("\n"):
        output += "\n"
    if result.exit_code is None:
        status = f"[exit status: none (killed); cwd: {result.cwd}]"
    else:
        status = f"[exit status: {result.exit_code}; cwd: {result.cwd}]"
    return f"{output}{status}"


class TerminalEnv(TextEnv):
    """Solve a shell task in a fresh hardened container, one command per turn.

    ## Description
    Each episode gives the agent a task (Terminal-Bench style: file and text processing,
    CSV/JSON wrangling, scripting, archives, permissions, small build and debugging chores; no
    network) and a persistent bash shell in ``/app`` of a fresh container taken from a warm
    pool. The container has the sandbox's hardening (no network, read-only root, no
    capabilities, ``no-new-privileges``, pids/memory/CPU limits, ``--init``, the agent as uid
    65534 and the keep-alive as another uid) and a size-capped tmpfs ``/app``; it is removed
    when the episode ends, so nothing an episode does survives it. Success is decided by the
    task's checks, which run in a separate checker container on a copy of ``/app``: the agent
    can neither read nor change them.

    ## Spaces
    Observation and action: any ``str``. An action is a shell command (raw or fenced; several
    lines run as one script) and/or ``submit``, or tool calls (:data:`TOOLS`:
    ``run_command(command)``, ``submit()``, or both in that order); empty text is a parse
    error that costs a turn.

    ## Rewards
    1.0 on the step that ends the episode with every check passing, else 0.0 (Terminal-Bench's
    binary resolution).

    ## Episode End
    ``terminated`` on ``submit`` or, with ``end_on_success=True`` (default, as the other MT
    envs), as soon as every check passes; ``truncated`` when the turn budget is spent.

    ## Arguments
    ``max_turns`` (default 20), ``budget_mode``, ``render_mode``, ``tasks`` (``"bundled"`` or a
    sequence of :class:`TerminalTask`, e.g. from :func:`load_terminal_bench_task`),
    ``categories`` and ``difficulties`` (filters), ``end_on_success``, ``command_timeout_s`` (30),
    ``output_cap`` (bytes of output shown per command, head and tail; 10,000),
    ``warm`` (containers kept ready, 1), ``memory_mb`` (512), ``pids_limit`` (128), ``cpus``
    (1.0), ``app_mb`` (size of ``/app``, 256), ``check_timeout_s`` (30), ``image`` (the
    default image; tasks may name their own).

    ## Oracle
    ``step_score``: share of the task's checks passing after the action (run off the agent's
    path on a copy of ``/app``; cached by the tree's bytes, so a command that changes nothing
    costs one archive read). ``expert_action``: the next command of the reference solution
    while the agent has followed it exactly; off that path, the whole reference solution as
    one script from ``/app`` (a documented approximation); ``submit`` once every check passes.
    ``error_action``: a one-edit mutation of the expert's command (a number, a file name, a
    flag). ``get_state``/``set_state``: the ``/app`` tree (a tar) plus the shell's state (cwd,
    variables, functions, aliases), restored onto a fresh container; running processes and
    ``/tmp`` are not part of a snapshot (docs/envs/terminal.md has the measurements behind
    this choice).

    ## Version History
    * v0: initial version.
    """

    blocking_io = True  # commands and checks wait on containers: astep runs in a thread
    max_tool_calls = 2  # run_command then submit

    def __init__(
        self,
        max_turns: int | None = 20,
        budget_mode: BudgetMode = "hidden",
        render_mode: str | None = None,
        *,
        tasks: str | Sequence[TerminalTask] = "bundled",
        categories: Sequence[str] | None = None,
        difficulties: Sequence[str] | None = None,
        end_on_success: bool = True,
        command_timeout_s: float = 30.0,
        output_cap: int = 10_000,
        warm: int = 1,
        memory_mb: int = 512,
        pids_limit: int = 128,
        cpus: float = 1.0,
        app_mb: int = 256,
        check_timeout_s: float = 30.0,
        image: str = TERMINAL_IMAGE,
    ) -> None:
        super().__init__(max_turns=max_turns, budget_mode=budget_mode, render_mode=render_mode)
        self.action_space = ShellText()
        if isinstance(tasks, str):
            if tasks != "bundled":
                raise ValueError(
                    f"tasks must be 'bundled' or a list of TerminalTask, not {tasks!r}"
                )
            from multiturn_envs.envs.terminal.bundled import bundled_tasks

            loaded = bundled_tasks()
        else:
            loaded = list(tasks)
        loaded = select_tasks(loaded, categories, difficulties)
        if not loaded:
            raise ValueError("no tasks selected")
        self._tasks: dict[str, TerminalTask] = {}
        for task in loaded:
            if task.task_id in self._tasks:
                raise ValueError(f"duplicate task id {task.task_id!r}")
            self._tasks[task.task_id] = task
        self.end_on_success = bool(end_on_success)
        self.command_timeout_s = float(command_timeout_s)
        self.output_cap = int(output_cap)
        self.warm = int(warm)
        self.memory_mb = int(memory_mb)
        self.pids_limit = int(pids_limit)
        self.cpus = float(cpus)
        self.app_mb = int(app_mb)
        self.check_timeout_s = float(check_timeout_s)
        self.image = image
        # heavy resources, per image, started lazily
        self._sandboxes: dict[str, Any] = {}  # image -> DockerSandbox (its hardening)
        self._pools: dict[str, WarmContainers[ShellSession]] = {}
        self._checkers: dict[str, Checker] = {}
        self._initial: dict[str, tuple[bytes, str]] = {}  # task -> (tar for /app, digest)
        self._task: TerminalTask | None = None
        self._episode: _Episode | None = None
        self._executed: list[str] = []
        self._report: CheckReport | None = None
        self._digest = ""
        self.last_command: CommandResult | None = None

    # ------------------------------------------------------------------ resources
    def _image_of(self, task: TerminalTask) -> str:
        return task.image or self.image

    def _container_factory(self, image: str) -> Callable[[], Any]:
        import docker
        from docker.types import DriverConfig, Mount

        from multiturn_envs.sandbox.docker_pool import DockerSandbox

        sandbox = self._sandboxes.get(image)
        if sandbox is None:
            sandbox = DockerSandbox(
                image=image, memory_mb=self.memory_mb, cpus=self.cpus, pids_limit=self.pids_limit
            )
            self._sandboxes[image] = sandbox
        options = f"size={self.app_mb}m,uid={AGENT_UID},gid={AGENT_UID},mode=0755,nosuid,nodev"
        app = Mount(
            APP,
            None,
            type="volume",
            driver_config=DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": options}),
        )

        def make() -> Any:
            # the sandbox's orphan reaper (on its first use) lists containers and inspects each;
            # one removed in between (ours, by the background reaper) fails that: try again
            for attempt in range(3):
                try:
                    return sandbox.hardened_container(mounts=[app])
                except docker.errors.NotFound:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        return make

    def _pool(self, image: str) -> WarmContainers[ShellSession]:
        pool = self._pools.get(image)
        if pool is None:
            make = self._container_factory(image)

            def prepare(container: Any) -> ShellSession:
                return ShellSession(
                    container.client.api,
                    container.id,
                    workdir=APP,
                    environment=SHELL_ENV,
                    output_cap=self.output_cap,
                    state_dir=SHELL_STATE_DIR,
                )

            pool = WarmContainers(make, prepare, size=self.warm)
            self._pools[image] = pool
        return pool

    def _checker(self, image: str) -> Checker:
        checker = self._checkers.get(image)
        if checker is None:
            checker = Checker(self._container_factory(image), timeout_s=self.check_timeout_s)
            self._checkers[image] = checker
        return checker

    def _new_episode(self, task: TerminalTask, app_tar: bytes | None) -> _Episode:
        """A fresh container from the warm pool with ``app_tar`` in ``/app``; the old one goes."""
        pool = self._pool(self._image_of(task))
        container, shell = pool.take()
        try:
            if app_tar is not None and not container.put_archive(APP, app_tar):
                raise RuntimeError("put_archive into /app failed")
        except Exception:
            pool.discard(container)
            raise
        self._end_episode()
        self._episode = _Episode(container, shell)
        return self._episode

    def _end_episode(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            episode.shell.close()
            pool = self._pools.get(self._image_of(self._task)) if self._task else None
            if pool is not None:
                pool.discard(episode.container)
            else:
                with contextlib.suppress(Exception):
                    episode.container.remove(force=True, v=True)

    def container_ids(self) -> list[str]:
        """Every container this env holds (warm, in use, checkers): for leak tests."""
        ids: list[str] = []
        for pool in self._pools.values():
            ids += pool.live_ids()
        for checker in self._checkers.values():
            ids += checker.container_ids()
        return ids

    def _close(self) -> None:
        self._end_episode()
        for pool in self._pools.values():
            pool.close()
        for checker in self._checkers.values():
            checker.close()
        for sandbox in self._sandboxes.values():
            sandbox.close()
        self._pools.clear()
        self._checkers.clear()
        self._sandboxes.clear()

    # ------------------------------------------------------------------ tasks
    def task_ids(self) -> Sequence[str]:
        return list(self._tasks)

    def task(self, task_id: str | None = None) -> TerminalTask:
        """The task ``task_id`` (default: the current one)."""
        if task_id is None:
            if self._task is None:
                raise RuntimeError("no task loaded; call reset()")
            return self._task
        return self._tasks[task_id]

    def _app_archive(self) -> bytes:
        """``/app`` of the running episode as the engine's tar (members ``app/...``)."""
        assert self._episode is not None
        stream, _ = self._episode.container.get_archive(APP)
        return archive_bytes(stream)

    def _prepare_initial(self, task: TerminalTask) -> tuple[bytes, str]:
        """The task's starting ``/app`` (files, then ``setup``), built once and cached."""
        cached = self._initial.get(task.task_id)
        if cached is not None:
            return cached
        episode = self._new_episode(task, files_tar(dict(task.files)) if task.files else None)
        if task.app_from_image:
            client = episode.container.client
            holder = client.containers.create(self._image_of(task), ["true"])
            try:
                stream, _ = holder.get_archive(APP)
                image_app = strip_top(archive_bytes(stream))
            finally:
                holder.remove(force=True, v=True)
            if not episode.container.put_archive(APP, image_app):
                raise RuntimeError(f"could not copy the image's {APP} of task {task.task_id}")
        if task.setup.strip():
            code, output = episode.container.exec_run(
                ["bash", "-c", task.setup],
                user=f"{AGENT_UID}:{AGENT_UID}",
                workdir=APP,
                environment=SHELL_ENV,
            )
            if code != 0:
                raise RuntimeError(
                    f"the setup of task {task.task_id} failed ({code}): {output[-500:]!r}"
                )
        archive = self._app_archive()
        cached = (strip_top(archive), _content_digest(archive))
        self._initial[task.task_id] = cached
        return cached

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        if task_id not in self._tasks:
            raise KeyError(f"unknown task id {task_id!r}")
        task = self._tasks[task_id]
        if task.task_id in self._initial:
            tar, digest = self._initial[task.task_id]
            self._end_episode()
            self._task = task
            self._new_episode(task, tar)
        else:
            self._end_episode()
            self._task = task
            _, digest = self._prepare_initial(task)
        self._executed = []
        self._report = None
        self._digest = digest
        self.last_command = None
        return (
            f"{task.instruction.strip()}\n\n"
            f"You are in a bash shell in {APP} (no network). {FORMAT_HINT}"
        )

    # ------------------------------------------------------------------ stepping
    def check_report(self) -> CheckReport:
        """The checks' verdicts on the current ``/app`` (for tests and analyses; the agent never
        sees them)."""
        self._require_live()
        return self._report if self._report is not None else self._check()

    def _check(self) -> CheckReport:
        task = self.task()
        archive = self._app_archive()
        self._digest = _content_digest(archive)
        support = files_tar(dict(task.support_files), mode=0o644) if task.support_files else None
        report = self._checker(self._image_of(task)).check(archive, task.checks, support)
        if task.score_from_pytest and report.error is None:
            report = _pytest_report(report)
        self._report = report
        return report

    def tools(self) -> Sequence[Tool]:
        return TOOLS

    def _read(self, action: str) -> ParsedAction:
        """The command and/or submit of a reply: tool calls, else the text forms."""
        calls = self.read_tool_calls(action)
        if calls is None:
            return parse_action(action)
        if isinstance(calls, list):
            return parsed_of_calls(calls)
        return ParsedAction(None, False, str(calls))

    def _step(self, action: str) -> StepOutcome:
        task = self.task()
        assert self._episode is not None
        last_turn = self.turns_left is not None and self.turns_left <= 1
        parsed = self._read(action)
        extra: dict[str, Any] = {"exit_code": None, "cwd": self._episode.shell.cwd}
        if parsed.error is not None:
            observation = parsed.error
        elif parsed.command is not None:
            timeout = task.command_timeout_s or self.command_timeout_s
            try:
                result = self._episode.shell.run(parsed.command, timeout)
            except Exception as exc:  # no shell could be restarted in this container
                result = self._move_to_fresh_container(exc)
            self.last_command = result
            self._executed.append(parsed.command)
            observation = format_observation(result)
            extra.update(
                exit_code=result.exit_code,
                cwd=result.cwd,
                timed_out=result.timed_out,
                shell_restarted=result.restarted,
                output_truncated=result.omitted_bytes > 0,
            )
        else:
            observation = ""
        if parsed.command is not None or self._report is None:
            report = self._check()
        else:
            report = self._report
        if report.error is not None:
            observation += f"\n[the checker failed: {report.error}]"
        solved = report.all_passed
        extra.update(
            checks_passed=sum(report.passed),
            checks_total=len(report.passed) if report.passed else len(task.checks),
        )
        if parsed.submit:
            verdict = "pass" if solved else "do not pass"
            observation = (observation + "\n" if observation else "") + (
                f"Submitted. The task's tests {verdict}."
            )
            return StepOutcome(
                observation, float(solved), True, solved, report.score, parsed.error, extra
            )
        terminated = self.end_on_success and solved
        if terminated:
            observation += "\nThe task's tests pass: the task is complete."
        reward = float(solved) if (terminated or last_turn) else 0.0
        return StepOutcome(
            observation, reward, terminated, solved, report.score, parsed.error, extra
        )

    def _move_to_fresh_container(self, why: Exception) -> CommandResult:
        """Carry ``/app`` and the shell's last saved state over to a fresh container.

        The last resort when the episode's container cannot run a shell any more (a fork bomb
        holding every pid makes the engine refuse execs). Both are read by the engine itself
        (``get_archive``), which needs nothing from inside the container.
        """
        assert self._episode is not None
        old = self._episode.container
        app = strip_top(self._app_archive())
        stream, _ = old.get_archive(f"{SHELL_STATE_DIR}/state")
        with tarfile.open(fileobj=io.BytesIO(archive_bytes(stream))) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member is not None else None
            shell_state = handle.read().decode("utf-8", "surrogateescape") if handle else ""
        episode = self._new_episode(self.task(), app)
        episode.shell.load_state(shell_state)
        note = (
            f"[the container stopped running commands ({type(why).__name__}); the episode "
            f"moved to a fresh container with /app and the shell's state; cwd {episode.shell.cwd}]"
        )
        return CommandResult(note, None, episode.shell.cwd, restarted=True)

    # ------------------------------------------------------------------ snapshots
    def _get_state(self) -> Any:
        assert self._episode is not None and self._task is not None
        return {
            "task_id": self._task.task_id,
            "app_tar": strip_top(self._app_archive()),
            "shell": self._episode.shell.saved_state(),
            "cwd": self._episode.shell.cwd,
            "executed": list(self._executed),
            "report": self._report,
            "digest": self._digest,
        }

    def _set_state(self, state: Any) -> None:
        task = self._tasks[state["task_id"]]
        self._end_episode()
        self._task = task
        episode = self._new_episode(task, state["app_tar"])
        episode.shell.load_state(state["shell"])
        self._executed = list(state["executed"])
        self._report = state["report"]
        self._digest = state["digest"]

    def state_key(self) -> str:
        digest = hashlib.sha1(self._last_observation.encode("utf-8", "surrogatepass"))
        digest.update(f"{self._task_id}\0{self._digest}".encode())
        if self._episode is not None:
            digest.update(self._episode.shell.cwd.encode("utf-8", "surrogateescape"))
        return digest.hexdigest()[:16]

    # ------------------------------------------------------------------ oracle
    def expert_action(self) -> str:
        solved = self._report is not None and self._report.all_passed
        return expert_command(self._executed, self.task().solution, solved)

    def error_action(self, rng: np.random.Generator) -> str:
        return error_command(self.expert_action(), self.task().solution, rng)

    def random_action(self, rng: np.random.Generator) -> str:
        """A random exploratory command of the kinds agents send (never ``submit``)."""
        task = self.task()
        files = sorted(task.files) or ["."]
        name = files[int(rng.integers(len(files)))]
        kinds = ("ls", "pwd", f"cat {name}", f"wc -l {name}", "ls -R | head -20", "cd .. && pwd")
        if rng.random() < 0.25:
            return self.error_action(rng)
        return kinds[int(rng.integers(len(kinds)))]

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT + "\n" + FORMAT_HINT


def _pytest_report(report: CheckReport) -> CheckReport:
    """Re-score a Terminal-Bench check by pytest's ``-rA`` summary lines (its parser's rule:
    PASSED, XFAIL and SKIPPED pass; FAILED and ERROR fail)."""
    passed: list[bool] = []
    names: list[str] = []
    for output, ok in zip(report.outputs, report.passed):
        for line in output.splitlines():
            word, _, rest = line.partition(" ")
            if word in ("PASSED", "XFAIL", "SKIPPED", "FAILED", "ERROR"):
                names.append(rest.split(" - ")[0])
                passed.append(word in ("PASSED", "XFAIL", "SKIPPED"))
        if not ok and all(passed):  # the script failed without a failing test line
            names.append("run-tests.sh")
            passed.append(False)
    if not passed:
        return report
    return CheckReport(tuple(names), tuple(passed), report.outputs)
