"""The host side of the checker: score an ``/app`` tree against a task's checks, off the agent's
path.

The checks run in a container of their own (:mod:`.check_runner`, one long-lived session per
image), never in the agent's: the agent's ``/app`` is copied there as the tar the engine's
``get_archive`` returns. So the agent cannot read the checks, cannot modify them, and a check
cannot change the agent's state. Results are cached by the tar's digest: a command that leaves
``/app`` as it was (``ls``, ``cat``, ``grep``) costs one ``get_archive`` and no check run.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import io
import json
import tarfile
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multiturn_envs.sandbox.shell_session import ExecStream

RUNNER_SOURCE = Path(__file__).with_name("check_runner.py")
CHECKER_UID = 65534


@dataclass(frozen=True)
class Check:
    """One check of a task: a bash script that passes when it exits with status 0.

    It runs with ``/app`` (a copy of the agent's) as its working directory, ``HOME=/app`` and
    ``TEST_DIR=/tmp/checks`` (the task's support files, if any).
    """

    name: str
    script: str


@dataclass(frozen=True)
class CheckReport:
    """The checks' verdicts on one ``/app`` tree."""

    names: tuple[str, ...]
    passed: tuple[bool, ...]
    outputs: tuple[str, ...]
    error: str | None = None

    @property
    def score(self) -> float:
        """Share of the checks passing (0 when the checker failed)."""
        if self.error is not None or not self.passed:
            return 0.0
        return sum(self.passed) / len(self.passed)

    @property
    def all_passed(self) -> bool:
        return self.error is None and bool(self.passed) and all(self.passed)


def archive_bytes(stream: Any) -> bytes:
    """The bytes of a ``get_archive`` stream."""
    return b"".join(stream)


def _runner_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = RUNNER_SOURCE.read_bytes()
        info = tarfile.TarInfo("check_runner.py")
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Checker:
    """Runs checks on ``/app`` trees in a dedicated container made by ``make_container``.

    Args:
        make_container: a new hardened container of the task's image with an ``/app`` the
            checker's uid can write (the env passes the same factory as for agents).
        timeout_s: each check's time limit.
        cache_size: verdicts kept, keyed by (checks, tar digest).
    """

    def __init__(
        self, make_container: Callable[[], Any], timeout_s: float = 30.0, cache_size: int = 256
    ) -> None:
        self._make = make_container
        self.timeout_s = float(timeout_s)
        self._cache: OrderedDict[str, CheckReport] = OrderedDict()
        self._cache_size = int(cache_size)
        self._container: Any = None
        self._stream: ExecStream | None = None
        self.runs = 0
        self.cache_hits = 0
        atexit.register(self.close)  # an env never closed still removes its checker at exit

    def _start(self) -> ExecStream:
        if self._stream is not None and not self._stream.closed:
            return self._stream
        self._stop()
        container = self._make()
        self._container = container
        if not container.put_archive("/job", _runner_tar()):
            raise RuntimeError("put_archive of the check runner failed")
        self._stream = ExecStream(
            container.client.api,
            container.id,
            ["python3", "-I", "-B", "/job/check_runner.py"],
            user=f"{CHECKER_UID}:{CHECKER_UID}",
            workdir="/tmp",
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

    def check(
        self,
        app_tar: bytes,
        checks: Sequence[Check],
        support_tar: bytes | None = None,
    ) -> CheckReport:
        """The verdicts of ``checks`` on the tree in ``app_tar`` (``get_archive('/app')``)."""
        key = hashlib.sha256(
            json.dumps([[c.name, c.script] for c in checks]).encode()
            + hashlib.sha256(support_tar or b"").digest()
            + app_tar
        ).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self.cache_hits += 1
            return cached
        report = self._run(app_tar, checks, support_tar)
        if report.error is None:
            self._cache[key] = report
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return report

    def _run(
        self, app_tar: bytes, checks: Sequence[Check], support_tar: bytes | None
    ) -> CheckReport:
        names = tuple(c.name for c in checks)
        job = {
            "checks": [{"name": c.name, "script": c.script} for c in checks],
            "timeout_s": self.timeout_s,
            "app_tar": base64.b64encode(app_tar).decode("ascii"),
            "support_tar": None
            if support_tar is None
            else base64.b64encode(support_tar).decode("ascii"),
        }
        last = ""
        for _attempt in range(2):  # a checker killed by a check (same uid) is replaced once
            stream = self._start()
            self.runs += 1
            try:
                stream.send((json.dumps(job) + "\n").encode())
            except OSError as exc:
                last = f"could not send the job: {exc}"
                self._stop()
                continue
            line = bytearray()
            deadline = time.monotonic() + self.timeout_s * max(1, len(checks)) + 60
            while b"\n" not in line:
                data = stream.read(deadline)
                if not data:
                    break
                line.extend(data)
            if b"\n" not in line:
                last = "the checker died or did not answer"
                self._stop()
                continue
            answer = json.loads(bytes(line).split(b"\n", 1)[0])
            if "error" in answer:
                return CheckReport(names, (), (), error=str(answer["error"]))
            results = answer["results"]
            return CheckReport(
                names,
                tuple(bool(r["passed"]) for r in results),
                tuple(str(r["output"]) for r in results),
            )
        return CheckReport(names, (), (), error=last)

    def close(self) -> None:
        """Remove the checker's container; idempotent."""
        self._stop()
        atexit.unregister(self.close)
