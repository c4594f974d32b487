"""The host side of the checker: run a task's tests on a copy of the agent's writable
directories, in a container of their own, off the agent's path.

The tests never enter the agent's container. The agent's writable directories are read by the
engine (:func:`~multiturn_envs.envs.terminal.containers.read_state`) and streamed, with the
tests, to the runner (:mod:`.check_runner`) of a checker container of the same image and
layout, one long-lived session per checker. The verdict is computed here from what the runner
itself observed (:mod:`.verdicts`), never from a file or a line the agent's code could stand in
for. Verdicts are cached by the state's digest (names, contents, modes, owners and times): a
command that leaves the state as it was (``ls``, ``cat``, ``grep``) costs the reads and no run.

A runner that dies, hangs or answers nonsense takes its container with it: the checker starts
a fresh one and tries the job once more; if that fails too the report carries the ``error``
(the env then counts the checks as failing and says nothing about it to the agent, so a
test that kills what it can reach gains no signal from doing so).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import json
import tarfile
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multiturn_envs.envs.terminal.tar_files import files_tar
from multiturn_envs.envs.terminal.verdicts import parse_pytest_summary, parse_reward
from multiturn_envs.safejson import loads_bounded
from multiturn_envs.sandbox.shell_session import ExecStream

if TYPE_CHECKING:
    from multiturn_envs.envs.terminal.containers import State

RUNNER_SOURCE = Path(__file__).with_name("check_runner.py")
RUNNER_DIR = "/mte-runner"
ANSWER_CAP = 16 << 20


@dataclass(frozen=True)
class Check:
    """One check of a task: a bash script.

    With the ``exit-status`` verdict it passes when it exits with status 0. It runs in the
    task's working directory (a copy of the agent's), as the task's verifier user, with
    ``TEST_DIR=/tests`` (the task's test files), ``HOME`` an empty directory of the checker's,
    ``PATH`` the system's, and git told to ignore the repository's hooks and monitors: run
    Python as ``python3 -I`` so that a module the agent left in the working directory cannot
    stand in for the standard library.
    """

    name: str
    script: str


@dataclass(frozen=True)
class CheckReport:
    """The tests' verdict on one state.

    ``names``/``passed``: the checks (``exit-status``) or the tests (``pytest-summary``) and
    whether each passed; ``reward``: the Harbor reward (``reward-file``); ``error``: the tests
    could not be run (the verdict is then a failure); ``note``: why a verdict failed that is
    not in the tests' own words (no pytest summary, no reward file, a state too large).
    """

    names: tuple[str, ...]
    passed: tuple[bool, ...]
    outputs: tuple[str, ...]
    error: str | None = None
    reward: float | None = None
    note: str | None = None

    @property
    def score(self) -> float:
        """The share of checks passing, or the reward (0 when the tests could not run)."""
        if self.error is not None:
            return 0.0
        if self.reward is not None:
            return self.reward
        if not self.passed:
            return 0.0
        return sum(self.passed) / len(self.passed)

    @property
    def all_passed(self) -> bool:
        if self.error is not None:
            return False
        if self.reward is not None:
            return self.reward >= 1.0
        return bool(self.passed) and all(self.passed)


@dataclass(frozen=True)
class CheckJob:
    """What the runner needs besides the state: see :mod:`.check_runner`."""

    checks: tuple[Check, ...]
    verdict: str = "exit-status"
    user: str = "65534:65534"
    workdir: str = "/app"
    env: Mapping[str, str] = field(default_factory=dict)
    tests: Mapping[str, bytes] = field(default_factory=dict)
    timeout_s: float = 30.0

    @property
    def output_cap(self) -> int:
        return 4000 if self.verdict == "exit-status" else 1 << 20

    def key(self) -> str:
        digest = hashlib.sha256(
            json.dumps(
                [
                    [[c.name, c.script] for c in self.checks],
                    self.verdict,
                    self.user,
                    self.workdir,
                    sorted(self.env.items()),
                    self.timeout_s,
                ]
            ).encode()
        )
        for path in sorted(self.tests):
            digest.update(path.encode() + b"\0" + hashlib.sha256(self.tests[path]).digest())
        return digest.hexdigest()


def tests_tar(files: Mapping[str, bytes]) -> bytes:
    """The tests as a tar for ``/tests``: root's, readable by all, scripts executable."""
    return files_tar(files, uid=0, mode=lambda path: 0o755 if path.endswith(".sh") else 0o644)


def _runner_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = RUNNER_SOURCE.read_bytes()
        info = tarfile.TarInfo("check_runner.py")
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def report_from_answer(answer: dict[str, Any], job: CheckJob) -> CheckReport:
    """The verdict of a runner's answer under the job's rule (:mod:`.verdicts`)."""
    names = tuple(c.name for c in job.checks)
    if "error" in answer:
        return CheckReport(names, (), (), error=str(answer["error"]))
    results = answer["results"]
    outputs = tuple(str(r["output"]) for r in results)
    if job.verdict == "exit-status":
        return CheckReport(
            tuple(str(r["name"]) for r in results),
            tuple(bool(r["passed"]) for r in results),
            outputs,
        )
    if job.verdict == "pytest-summary":
        tests = parse_pytest_summary(outputs[0] if outputs else "")
        if tests is None:
            why = "the tests printed no pytest summary (Terminal-Bench: a parse error)"
            if results and results[0].get("timed_out"):
                why = f"the tests did not finish within {job.timeout_s:g} s"
            return CheckReport(names, (False,), outputs, note=why)
        if not tests:
            return CheckReport(names, (False,), outputs, note="the pytest summary lists no test")
        return CheckReport(tuple(tests), tuple(tests.values()), outputs)
    reward = parse_reward(answer.get("reward_json"), answer.get("reward_txt"))
    if reward.value is None:
        return CheckReport(names, (False,), outputs, reward=0.0, note=reward.problem)
    return CheckReport(names, (reward.value >= 1.0,), outputs, reward=reward.value)


class Checker:
    """Runs tests on states in a checker container made by ``make_container`` (see the module
    docstring).

    Args:
        make_container: a new checker container of the task's image and layout.
        paths: the writable directories (the order of a state's parts).
        cache_size: verdicts kept, keyed by (job, state digest).
        slack_s: how long past the tests' own limits the host waits for an answer.
    """

    def __init__(
        self,
        make_container: Callable[[], Any],
        paths: Sequence[str],
        cache_size: int = 256,
        slack_s: float = 60.0,
    ) -> None:
        self._make = make_container
        self.paths = tuple(paths)
        self._cache: OrderedDict[str, CheckReport] = OrderedDict()
        self._cache_size = int(cache_size)
        self.slack_s = float(slack_s)
        self._container: Any = None
        self._stream: ExecStream | None = None
        self._tests: dict[str, bytes] = {}
        self.runs = 0
        self.cache_hits = 0
        atexit.register(self.close)  # an env never closed still removes its checker at exit

    def _start(self) -> ExecStream:
        if self._stream is not None and not self._stream.closed:
            return self._stream
        self._stop()
        container = self._make()
        self._container = container
        if not container.put_archive(RUNNER_DIR, _runner_tar()):
            raise RuntimeError("put_archive of the check runner failed")
        self._stream = ExecStream(
            container.client.api,
            container.id,
            ["python3", "-I", "-B", f"{RUNNER_DIR}/check_runner.py"],
            user="0:0",
            workdir="/",
            environment={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        return self._stream

    def _stop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.remove(force=True, v=True)
            self._container = None

    def container_ids(self) -> list[str]:
        return [] if self._container is None else [self._container.id]

    def check(self, state: State, job: CheckJob) -> CheckReport:
        """The tests' verdict on ``state`` (see the module docstring)."""
        key = hashlib.sha256((job.key() + state.digest).encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self.cache_hits += 1
            return cached
        report = self._run(state, job)
        if report.error is None:
            self._cache[key] = report
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return report

    def _tests_tar(self, job: CheckJob) -> bytes:
        key = job.key()
        tar = self._tests.get(key)
        if tar is None:
            tar = tests_tar(job.tests) if job.tests else b""
            self._tests = {key: tar}  # one task at a time, usually
        return tar

    def _run(self, state: State, job: CheckJob) -> CheckReport:
        names = tuple(c.name for c in job.checks)
        tests = self._tests_tar(job)
        header = {
            "writable": list(self.paths),
            "trees": [[p.path, p.size, list(p.tops)] for p in state.parts],
            "tests": len(tests),
            "verdict": job.verdict,
            "checks": [{"name": c.name, "script": c.script} for c in job.checks],
            "user": job.user,
            "workdir": job.workdir,
            "env": dict(job.env),
            "timeout_s": job.timeout_s,
            "output_cap": job.output_cap,
        }
        last = ""
        for _attempt in range(2):  # a runner that died or answered nonsense: a fresh container
            try:
                stream = self._start()
            except Exception as exc:
                last = f"the checker could not start: {type(exc).__name__}: {exc}"
                self._stop()
                continue
            self.runs += 1
            try:
                stream.send((json.dumps(header) + "\n").encode())
                for part in state.parts:
                    for data in state.chunks(part):
                        stream.send(data)
                if tests:
                    stream.send(tests)
            except OSError as exc:
                last = f"could not send the job: {exc}"
                self._stop()
                continue
            answer = self._answer(stream, job)
            if answer is None:
                last = "the checker died or did not answer"
                self._stop()
                continue
            if "error" in answer:
                last = str(answer["error"])
                self._stop()  # its stream may be out of step: start afresh
                if last.startswith("the state could not be unpacked"):
                    break
                continue
            return report_from_answer(answer, job)
        return CheckReport(names, (), (), error=last)

    def _answer(self, stream: ExecStream, job: CheckJob) -> dict[str, Any] | None:
        line = bytearray()
        deadline = time.monotonic() + job.timeout_s * max(1, len(job.checks)) + self.slack_s
        while b"\n" not in line:
            data = stream.read(deadline)
            if not data:
                return None
            line.extend(data)
            if len(line) > ANSWER_CAP:
                return None
        try:  # from the checker's container: measured before it is parsed
            answer = loads_bounded(bytes(line).split(b"\n", 1)[0], max_bytes=ANSWER_CAP)
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None

    def close(self) -> None:
        """Remove the checker's container; idempotent."""
        self._stop()
        atexit.unregister(self.close)
