"""The env: :class:`TerminalEnv` (``MT/Terminal-v0``)."""

from __future__ import annotations

import hashlib
import shlex
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv
from multiturn_envs.envs.terminal.oracle import error_command, expert_command
from multiturn_envs.envs.terminal.parsing import (
    FORMAT_HINT,
    MAX_COMMAND_CHARS,
    ParsedAction,
    parse_action,
)
from multiturn_envs.envs.terminal.prepare import Prepared, Preparer
from multiturn_envs.envs.terminal.tasks import TerminalTask, select_tasks
from multiturn_envs.envs.terminal.verdicts import CheckReport, report_from_answer
from multiturn_envs.extras import ENV_EXTRAS
from multiturn_envs.extras import require as require_extra
from multiturn_envs.sandbox.checker import Checker
from multiturn_envs.sandbox.provider import (
    UNTRUSTED_CODE,
    Box,
    Capability,
    EngineGone,
    Provider,
    ResourceLimits,
    require,
)
from multiturn_envs.sandbox.shell_session import STATE_CAP, CommandResult, ShellSession
from multiturn_envs.sandbox.state_keeper import KeeperFailed, StateKeeper
from multiturn_envs.sandbox.task_box import SHELL_STATE_DIR, agent_spec, checker_spec
from multiturn_envs.sandbox.terminal_image import terminal_image
from multiturn_envs.sandbox.trees import State, put_trees, read_state
from multiturn_envs.sandbox.warm_containers import WarmContainers
from multiturn_envs.spaces import UnicodeText
from multiturn_envs.tools import Tool, ToolCall


class StateTooLarge(RuntimeError):
    """A snapshot was asked of a state larger than the env's cap (sparse files count at their
    full size): it cannot be taken within bounded memory and time."""


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


NEEDS = UNTRUSTED_CODE | {Capability.TMPFS_VOLUMES, Capability.LONG_LIVED_PROCESS}
"""What a provider must enforce to run an agent's commands (``sandbox.provider``)."""


@dataclass
class _Episode:
    """What belongs to the running episode's box."""

    box: Box
    shell: ShellSession
    prepared: Prepared
    keeper: StateKeeper | None
    """Reads the state from inside the box (:mod:`~multiturn_envs.sandbox.state_keeper`);
    ``None`` once it failed: the engine reads it for the rest of the episode."""


@dataclass
class _Ready:
    """What the warm pool hands out with a box: its keeper (started first) and shell."""

    shell: ShellSession
    keeper: StateKeeper | None


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
    Each episode gives the agent a task (the bundled ones: file and text processing, CSV/JSON
    wrangling, scripting, archives, permissions, small build and debugging chores; or
    Terminal-Bench 1 and Harbor / Terminal-Bench 2 task folders) and a persistent bash shell in
    the task's working directory of a fresh container taken from a warm pool. The container
    has the sandbox's hardening (no network, read-only root, no capabilities but the file ones,
    which only a root agent and the box's own processes hold, ``no-new-privileges``,
    pids/memory/CPU limits, ``--init``, the keep-alive as another uid); the task's writable
    directories are size-capped tmpfs volumes; it is removed when the episode ends, so nothing
    an episode does survives it. Success is decided
    by the task's tests, which run in a separate checker container on a copy of the writable
    directories: the agent can neither read nor change them.

    ## Spaces
    Observation and action: any ``str``. An action is a shell command (raw or fenced; several
    lines run as one script) and/or ``submit``, or tool calls (:data:`TOOLS`:
    ``run_command(command)``, ``submit()``, or both in that order); empty text is a parse
    error that costs a turn.

    ## Rewards
    1.0 on the step that ends the episode with every check passing (a Harbor task: a reward of
    1), else 0.0 (Terminal-Bench's binary resolution).

    ## Episode End
    ``terminated`` on ``submit`` or, with ``end_on_success=True`` (default, as the other MT
    envs), as soon as every check passes; ``truncated`` when the turn budget is spent.

    ## Arguments
    ``max_turns`` (default 20), ``budget_mode``, ``render_mode``, ``tasks`` (``"bundled"`` or a
    sequence of :class:`TerminalTask`, e.g. from :func:`load_terminal_bench` or
    :func:`load_harbor`), ``categories`` and ``difficulties`` (filters), ``end_on_success``,
    ``command_timeout_s`` (30; a task may set its own), ``output_cap`` (bytes of output shown
    per command, head and tail; 10,000), ``warm`` (containers kept ready, 1), ``memory_mb``
    (512), ``pids_limit`` (128), ``cpus`` (1.0), ``app_mb`` (size of each writable directory,
    and the most file data a state may hold once archived, 256), ``check_timeout_s`` (30; a
    task may set its own), ``image`` (the terminal image: the default image and the base of
    the bundled tasks), ``engines`` (the Docker engines the boxes run on: addresses such as
    ``"local"``, ``"tcp://host:2376?tls=/certs"``, ``"ssh://user@host"``, placed by load;
    default ``$MTE_ENGINES`` or this machine's engine; docs/sandbox-scale-out.md),
    ``keeper`` (True: each box's state keeper reads and fills its writable directories from
    inside, in one round trip; False: the engine's archive requests alone, one per directory).

    ## Oracle
    ``step_score``: share of the task's checks (or tests) passing after the action, or its
    Harbor reward (run off the agent's path on a copy of the writable directories, read in
    full after every command; cached by the state's bytes, so a command that changes nothing
    costs that read and no run).
    ``expert_action``: the next command of the reference solution while the agent has
    followed it exactly; off that path, the whole reference solution as one script from the
    working directory (a documented approximation); ``submit`` once every check passes.
    ``error_action``: a one-edit mutation of the expert's command (a number, a file name, a
    flag). ``get_state``/``set_state``: the writable directories (tars) plus the shell's state
    (cwd, variables, functions, aliases), restored onto a fresh container; running processes
    are not part of a snapshot (docs/envs/terminal.md has the measurements behind this
    choice).

    ## Version History
    * v0: initial version.
    """

    blocking_io = True  # commands and checks wait on containers: astep runs in a thread
    max_tool_calls = 2  # run_command then submit
    not_picklable = not_copyable = "it holds a Docker container and the connection to it"

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
        image: str | None = None,
        engines: Sequence[str] | str | None = None,
        keeper: bool = True,
    ) -> None:
        require_extra("MT/Terminal-v0", *ENV_EXTRAS["MT/Terminal-v0"])
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
        self.keeper = bool(keeper)
        self.memory_mb = int(memory_mb)
        self.pids_limit = int(pids_limit)
        self.cpus = float(cpus)
        self.app_mb = int(app_mb)
        self.check_timeout_s = float(check_timeout_s)
        self.image = image or terminal_image()
        from multiturn_envs.sandbox.engines import parse_engines

        self.engines = tuple(str(a) for a in parse_engines(engines))  # refused here if malformed
        # heavy resources, started lazily
        self._provider: Provider | None = None
        self._preparer: Preparer | None = None
        self._prepared: dict[str, Prepared] = {}
        self._pools: dict[tuple[Any, ...], WarmContainers[_Ready]] = {}
        self._checkers: dict[tuple[Any, ...], Checker] = {}
        self._task: TerminalTask | None = None
        self._episode: _Episode | None = None
        self._executed: list[str] = []
        self._report: CheckReport | None = None
        self._digest = ""
        self.last_command: CommandResult | None = None

    # ------------------------------------------------------------------ resources
    @property
    def limits(self) -> ResourceLimits:
        """Each box's limits (memory, CPU, processes)."""
        return ResourceLimits(self.memory_mb, self.cpus, self.pids_limit)

    def provider(self) -> Provider:
        """Where the episodes' boxes run (the engines, placement by load), refused unless it
        enforces what an agent's commands need (:data:`NEEDS`)."""
        if self._provider is None:
            from multiturn_envs.sandbox.engine_set import EngineSet

            provider = EngineSet(self.engines)
            require(provider, NEEDS, "untrusted commands in MT/Terminal-v0")
            self._provider = provider
        return self._provider

    def _prepare(self, task: TerminalTask) -> Prepared:
        prepared = self._prepared.get(task.task_id)
        if prepared is None:
            if self._preparer is None:
                from multiturn_envs.sandbox.docker_engine import DockerEngine

                self._preparer = Preparer(
                    DockerEngine.shared("local"),
                    self.limits,
                    self.image,
                    self.app_mb,
                    self.check_timeout_s,
                )
            prepared = self._preparer.prepare(task)
            self._prepared[task.task_id] = prepared
        return prepared

    def prepared(self, task_id: str | None = None) -> Prepared:
        """How a task runs here: its layout, users, working directory, environment, the
        checker's job and the notes on what differs from its original harness."""
        return self._prepare(self.task(task_id))

    def _pool(self, prepared: Prepared) -> WarmContainers[_Ready]:
        key = (
            prepared.layout,
            prepared.agent_user,
            prepared.root,
            prepared.workdir,
            tuple(sorted(prepared.agent_env.items())),
        )
        pool = self._pools.get(key)
        if pool is None:
            provider = self.provider()
            spec = agent_spec(prepared.layout, prepared.root, self.limits)

            def make() -> Box:
                return provider.create(spec)

            def prepare(box: Box) -> _Ready:
                # the keeper before anything of the agent's runs; the shell started before the
                # task's files are in: in "/", moved at the episode's start
                keeper: StateKeeper | None = None
                if self.keeper:
                    try:
                        keeper = StateKeeper(box, prepared.layout.paths, (SHELL_STATE_DIR,))
                    except KeeperFailed:
                        keeper = None  # the engine reads and fills this box
                shell = ShellSession(
                    box,
                    user=prepared.agent_user,
                    workdir="/",
                    environment=prepared.agent_env,
                    output_cap=self.output_cap,
                    state_dir=SHELL_STATE_DIR,
                    pad=0,
                )
                return _Ready(shell, keeper)

            pool = WarmContainers(make, prepare, size=self.warm)
            self._pools[key] = pool
        return pool

    def _checker(self, prepared: Prepared) -> Checker:
        key = (prepared.layout, prepared.job.user)
        checker = self._checkers.get(key)
        if checker is None:
            provider = self.provider()
            spec = checker_spec(prepared.layout, self.limits)

            def make() -> Box:
                return provider.create(spec)

            checker = Checker(make, prepared.layout.paths)
            self._checkers[key] = checker
        return checker

    def _new_episode(
        self, prepared: Prepared, trees: dict[str, bytes], shell: str | None, line: int | None
    ) -> _Episode:
        """A fresh box from the warm pool with ``trees`` in its writable directories and
        ``shell`` (a saved shell state; ``None``: a fresh shell); the old one goes. A box
        whose engine went away is dropped for the next one (another engine's, once placement
        leaves the gone engine out)."""
        pool = self._pool(prepared)
        engine_put = False
        for attempt in range(3):
            box, ready = pool.take()
            session, keeper = ready.shell, ready.keeper
            try:
                if keeper is not None and not engine_put:
                    for path, tree in trees.items():
                        if tree:
                            keeper.put(path, tree)
                else:
                    put_trees(box, trees, prepared.root)
                session.workdir = prepared.workdir  # where a clean shell starts from now on
                session.load_state(shell or f"cd -- {shlex.quote(prepared.workdir)}", line)
            except Exception as exc:
                session.close()
                if keeper is not None:
                    keeper.close()
                pool.discard(box)
                if not isinstance(exc, (EngineGone, KeeperFailed)) or attempt == 2:
                    raise
                engine_put = engine_put or isinstance(exc, KeeperFailed)  # the next: the engine's
                continue
            break
        self._end_episode()
        self._episode = _Episode(box, session, prepared, keeper)
        return self._episode

    def _end_episode(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            episode.shell.close()
            if episode.keeper is not None:
                episode.keeper.close()
            for pool in self._pools.values():
                if episode.box.id in pool.live_ids():
                    pool.discard(episode.box)
                    break
            else:
                episode.box.close()

    def container_ids(self) -> list[str]:
        """Every container this env holds (warm, in use, checkers): for leak tests."""
        ids: list[str] = []
        for pool in self._pools.values():
            ids += pool.live_ids()
        for checker in self._checkers.values():
            ids += checker.box_ids()
        return ids

    def _close(self) -> None:
        self._end_episode()
        for checker in self._checkers.values():
            checker.close()
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        self._checkers.clear()
        self._preparer = None

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

    def _read_state(self, engine: bool = False) -> State:
        """The running episode's writable directories (capped; see :class:`State`): by the
        box's keeper in one round trip, else (``engine``, or once the keeper failed) one
        engine request each."""
        episode = self._episode
        assert episode is not None
        paths = episode.prepared.layout.paths
        if episode.keeper is not None and not engine:
            try:
                return episode.keeper.read(paths, self.app_mb << 20)
            except KeeperFailed:
                episode.keeper = None  # closed: the engine from now on
        return read_state(episode.box, paths, self.app_mb << 20)

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        if task_id not in self._tasks:
            raise KeyError(f"unknown task id {task_id!r}")
        task = self._tasks[task_id]
        prepared = self._prepare(task)
        self._end_episode()
        self._task = task
        self._new_episode(prepared, prepared.initial, None, None)
        self._executed = []
        self._report = None
        self._digest = prepared.digest
        self.last_command = None
        return (
            f"{task.instruction.strip()}\n\n"
            f"You are in a bash shell in {prepared.workdir} (no network). {FORMAT_HINT}"
        )

    # ------------------------------------------------------------------ stepping
    def check_report(self) -> CheckReport:
        """The tests' verdict on the current state (for tests and analyses; the agent never
        sees it)."""
        self._require_live()
        return self._report if self._report is not None else self._check()

    def _check(self) -> CheckReport:
        assert self._episode is not None
        prepared = self._episode.prepared
        state = self._read_state()
        try:
            if state.too_large is not None:
                report = CheckReport(
                    tuple(c.name for c in prepared.job.checks),
                    tuple(False for _ in prepared.job.checks),
                    (),
                    note=f"the tests were not run: {state.too_large}; the state counts as failing",
                )
            else:
                self._digest = state.content_digest
                answer = self._checker(prepared).check(state, prepared.job)
                report = report_from_answer(answer, prepared.job)
        finally:
            state.close()
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
            except EngineGone:
                raise  # the episode is lost with its engine: set_state(snapshot) moves on
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
        if report.note is not None and report.note.startswith("the tests were not run"):
            observation += f"\n[{report.note}]"  # the agent's own doing (a huge or sparse file)
        if report.error is not None:
            extra["checker_error"] = report.error  # never in the observation: no signal
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
        """Carry the writable directories and the shell's last saved state over to a fresh
        container.

        The last resort when the episode's container cannot run a shell any more (a fork bomb
        holding every pid makes the engine refuse execs). Both are read by the engine itself
        (``get_archive``), which needs nothing from inside the container.
        """
        assert self._episode is not None
        prepared = self._episode.prepared
        state = self._read_state(engine=True)
        try:
            if state.too_large is not None:
                trees = prepared.initial  # cannot be carried: start over, and say so
                lost = f"; its files were too large to carry ({state.too_large}): task restarted"
            else:
                trees, lost = state.trees(), ""
        finally:
            state.close()
        shell_state = self._episode.shell.saved_state()
        episode = self._new_episode(prepared, trees, shell_state, None)
        note = (
            f"[the container stopped running commands ({type(why).__name__}); the episode "
            f"moved to a fresh container with its files and the shell's state{lost}; "
            f"cwd {episode.shell.cwd}]"
        )
        return CommandResult(note, None, episode.shell.cwd, restarted=True)

    # ------------------------------------------------------------------ snapshots
    def _get_state(self) -> Any:
        assert self._episode is not None and self._task is not None
        state = self._read_state()
        try:
            if state.too_large is not None:
                raise StateTooLarge(f"no snapshot can be taken: {state.too_large}")
            trees = state.trees()
        finally:
            state.close()
        return {
            "task_id": self._task.task_id,
            "trees": trees,
            "shell": self._shell_state(),
            "line": self._episode.shell.line,
            "cwd": self._episode.shell.cwd,
            "executed": list(self._executed),
            "report": self._report,
            "digest": self._digest,
        }

    def _shell_state(self) -> str:
        """The shell's saved state (:meth:`ShellSession.saved_state`), read by the keeper."""
        episode = self._episode
        assert episode is not None
        if episode.keeper is not None:
            try:
                data = episode.keeper.read_file(episode.shell.state_file, STATE_CAP)
                return "" if data is None else data.decode("utf-8", "surrogateescape")
            except KeeperFailed:
                episode.keeper = None  # closed: the engine from now on
        return episode.shell.saved_state()

    def _set_state(self, state: Any) -> None:
        task = self._tasks[state["task_id"]]
        prepared = self._prepare(task)
        self._end_episode()
        self._task = task
        self._new_episode(prepared, state["trees"], state["shell"], state["line"])
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
        workdir = self._episode.prepared.workdir if self._episode is not None else "/app"
        return expert_command(self._executed, self.task().solution, solved, workdir)

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
