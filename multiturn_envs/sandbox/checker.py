"""The host side of the checker: run a task's tests on a copy of the agent's writable
directories, in a container of their own, off the agent's path.

The tests never enter the agent's container. The agent's writable directories are read by the
engine (:func:`~multiturn_envs.sandbox.trees.read_state`) and streamed, with the
tests, to the runner (:mod:`.check_runner`) of a checker box of the same image and layout
(:func:`~.task_box.checker_spec`), one long-lived session per checker. The answer is what the
runner itself observed; the env computes its verdict from it
(:mod:`multiturn_envs.envs.terminal.verdicts`), never from a file or a line the agent's code
could stand in for. Answers are cached by the state's digest (names, contents, modes, owners and
times): a command that leaves the state as it was (``ls``, ``cat``, ``grep``) costs the reads
and no run.

A runner that dies, hangs or answers nonsense takes its box with it: the checker starts a fresh
one and tries the job once more; if that fails too the answer is ``{"error": ...}`` (the env
then counts the checks as failing and says nothing about it to the agent, so a test that kills
what it can reach gains no signal from doing so).
"""

from __future__ import annotations

import atexit
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

from multiturn_envs.safejson import loads_bounded
from multiturn_envs.sandbox.provider import Box, EngineGone, ProcessStream
from multiturn_envs.sandbox.tar_files import files_tar
from multiturn_envs.sandbox.task_box import RUNNER_DIR

if TYPE_CHECKING:
    from multiturn_envs.sandbox.trees import State

RUNNER_SOURCE = Path(__file__).with_name("check_runner.py")
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


class Checker:
    """Runs tests on states in a checker box made by ``make_box`` (see the module docstring).

    :meth:`check` returns the runner's answer (``{"results": [...], "reward_json",
    "reward_txt"}``) or ``{"error": why}`` when the tests could not be run; the env turns it
    into a verdict under its task's rule.

    Args:
        make_box: a new checker box of the task's image and layout
            (:func:`~.task_box.checker_spec` on a provider).
        paths: the writable directories (the order of a state's parts).
        cache_size: answers kept, keyed by (job, state digest).
        slack_s: how long past the tests' own limits the host waits for an answer.
    """

    def __init__(
        self,
        make_box: Callable[[], Box],
        paths: Sequence[str],
        cache_size: int = 256,
        slack_s: float = 60.0,
    ) -> None:
        self._make = make_box
        self.paths = tuple(paths)
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._cache_size = int(cache_size)
        self.slack_s = float(slack_s)
        self._box: Box | None = None
        self._stream: ProcessStream | None = None
        self._tests: dict[str, bytes] = {}
        self.runs = 0
        self.cache_hits = 0
        atexit.register(self.close)  # an env never closed still removes its checker at exit

    def _start(self) -> ProcessStream:
        if self._stream is not None and not self._stream.closed:
            return self._stream
        self._stop()
        box = self._make()
        self._box = box
        box.put_archive(RUNNER_DIR, _runner_tar())
        self._stream = box.process(
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
        if self._box is not None:
            self._box.close()
            self._box = None

    def box_ids(self) -> list[str]:
        return [] if self._box is None else [self._box.id]

    container_ids = box_ids

    def check(self, state: State, job: CheckJob) -> dict[str, Any]:
        """The runner's answer on ``state`` (see the class docstring), from the cache when this
        job already ran on a state with the same digest."""
        key = hashlib.sha256((job.key() + state.digest).encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self.cache_hits += 1
            return cached
        answer = self._run(state, job)
        if "error" not in answer:
            self._cache[key] = answer
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return answer

    def _tests_tar(self, job: CheckJob) -> bytes:
        key = job.key()
        tar = self._tests.get(key)
        if tar is None:
            tar = tests_tar(job.tests) if job.tests else b""
            self._tests = {key: tar}  # one task at a time, usually
        return tar

    def _run(self, state: State, job: CheckJob) -> dict[str, Any]:
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
        for _attempt in range(2):  # a runner that died or answered nonsense: a fresh box
            try:
                stream = self._start()
            except EngineGone:
                self._stop()
                raise
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
            return answer
        return {"error": last}

    def _answer(self, stream: ProcessStream, job: CheckJob) -> dict[str, Any] | None:
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
        """Close the checker's box; idempotent."""
        self._stop()
        atexit.unregister(self.close)
