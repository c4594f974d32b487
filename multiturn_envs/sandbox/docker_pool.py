"""DockerSandbox: a pool of warm, hardened, labelled containers, each with one runner session.

Why a pool: creating a container costs ~250 ms. Why a session: an exec into a warm container
costs ~50 ms of latency and ~48 ms of host CPU (dockerd, containerd, the shim, runc), the
engine's floor, which alone caps a two-core machine at ~40 submissions/s and kept a 10-test
submission at ~110 ms. So each container runs ONE long-lived exec of the runner
(:mod:`multiturn_envs.sandbox.judge`, ``--serve``) and each submission is one job written to
that exec's stdin; the runner runs ALL its tests and answers with one report line per test and
``{"done": true}`` (docs/sandbox.md has the measurements). The container itself is kept alive
by ``sleep infinity``.

What a session keeps from one exec per submission: every job starts a fresh zygote from a new
interpreter (no test can find an earlier job's tests in its memory), every process of the
code's uid is killed after every job (``kill(-1)``) and everything the code can write (``/tmp``,
``/dev/shm``) is wiped, so nothing a submission leaves reaches a later one. A session that dies
(the code killed it: it shares the code's uid), stops answering within the job's guard, or
reports garbage takes its container with it: the container is removed and replaced lazily.

Hardening of every container (:mod:`.hardening`): no network, read-only root, no capabilities,
limits, ``/tmp`` the only writable scratch, the code under a uid that cannot stop the container.

Transport: the job (header, program, tests) is streamed on the session's stdin, so no test ever
lands on a disk the code can read (``transport="stdin"``, default). ``transport="archive"``
delivers it as a file with ``put_archive`` into the container's anonymous ``/job`` volume
instead (the engine refuses ``put_archive`` on a read-only root but accepts it on a volume) and
sends the session its path; the runner reads and deletes the file before any code runs. The
session and the engine's stream framing live in :mod:`.exec_session`.

Sharing: ``DockerSandbox.shared()`` is the process's one pool (per configuration, kept by
:mod:`.shared_pools`), used by every env instance by default; callers beyond ``size`` wait first
come, first served, each handed a released container directly. Time per job is bounded inside
the runner (per-test limit, stop at the first timeout, the job's deadline:
:class:`~multiturn_envs.sandbox.base.RunLimits`) and, should the runner be stopped or the engine
hang, by a host-side guard.

Recycling: a container whose session hit the job's guard, died or reported garbage, that was
OOM-killed (read from the engine's ``oom`` events), or that has served ``max_uses`` runs is
removed and replaced lazily.
Orphans (:mod:`.orphans`): at start-up, labelled containers whose owner process is gone are
removed by id (also ``multiturn-envs sandbox reap``). Whether an engine and the image are there
at all: :mod:`.engine`.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import io
import os
import tarfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from multiturn_envs.sandbox.base import RunLimits, RunResult, Sandbox, TestCase
from multiturn_envs.sandbox.engine import IMAGE
from multiturn_envs.sandbox.exec_session import RunnerSession
from multiturn_envs.sandbox.hardening import (
    CODE_UID,
    SCRATCH,
    WIPE,
    ContainerLimits,
    install_runner,
)
from multiturn_envs.sandbox.jobs import (
    RUNNER_STDERR_CAP,
    guard_seconds,
    header_frame,
    job_bytes,
    parse_report,
    report_bytes,
)
from multiturn_envs.sandbox.provider import (
    UNTRUSTED_CODE,
    Box,
    BoxSpec,
    Capability,
    MissingCapability,
    Provider,
    require,
)
from multiturn_envs.sandbox.shared_pools import SharedPools
from multiturn_envs.sandbox.warm_containers import wait_removed

__all__ = ["SIZE_VARIABLE", "DockerSandbox", "PoolSaturated", "default_pool_size"]

SIZE_VARIABLE = "MTE_SANDBOX_POOL_SIZE"
"""Environment variable overriding the default pool size (containers per pool)."""


def default_pool_size() -> int:
    """Containers per pool unless told otherwise: ``$MTE_SANDBOX_POOL_SIZE``, else the CPUs
    this process may run on.

    Each container runs one submission at a time and a submission is CPU-bound (one test at a
    time), so more containers than CPUs only add latency (docs/sandbox.md measures it).
    """
    text = os.environ.get(SIZE_VARIABLE, "").strip()
    if text:
        try:
            size = int(text)
        except ValueError:
            size = 0
        if size < 1:
            raise ValueError(f"{SIZE_VARIABLE} must be a positive integer, got {text!r}")
        return size
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _job_archive(program: str, job: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in (
            ("work/program.py", program.encode("utf-8"), 0o644),
            ("work/job.jsonl", job, 0o600),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), mode, CODE_UID, CODE_UID
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class _Worker:
    box: Box
    uses: int = 0
    session: RunnerSession | None = None


@dataclass(eq=False)
class _Waiter:
    """A submission waiting for a container: handed one (``worker``) or the right to start one
    (``create``), then woken by ``ready``; woken with neither when the pool closes."""

    ready: threading.Event = field(default_factory=threading.Event)
    worker: _Worker | None = None
    create: bool = False


class PoolSaturated(RuntimeError):
    """More submissions wait for a container than the pool's ``max_waiting`` allows."""


class DockerSandbox(Sandbox):
    """Runs programs in a pool of warm hardened containers (see the module docstring).

    A pool serves any number of threads: a run takes an idle container, starts a new one while
    the pool has fewer than ``size``, or waits in a first-come-first-served queue (a freed
    container goes to the submission that has waited longest, never to a newcomer), so callers
    feel back-pressure instead of the machine being oversubscribed. ``DockerSandbox.shared()``
    is the one pool of this process that every env instance uses by default, so 64 episodes in
    flight share a few warm containers instead of starting 64.

    Args:
        image: the sandbox image (build it with ``multiturn-envs sandbox build``).
        size: containers in the pool (default :func:`default_pool_size`: the CPUs this process
            may use, or ``$MTE_SANDBOX_POOL_SIZE``); runs beyond it wait their turn.
        memory_mb: each container's memory limit, swap included (per-test ``RunLimits.memory_mb``
            is enforced inside as ``RLIMIT_AS``).
        cpus: each container's CPU quota.
        pids_limit: each container's process limit (fork bombs stop here).
        tmpfs_mb: size of the writable ``/tmp``.
        max_uses: runs after which a container is replaced anyway.
        transport: ``"stdin"`` (stream the job on the session's stdin) or ``"archive"``
            (``put_archive`` into the ``/job`` volume, the session is sent its path).
        max_waiting: submissions allowed to wait for a container; one more gets an error result
            at once (``None``: no limit; waiting is the back-pressure).
        guard_slack_s: how long past a job's own time guard the host waits for its report
            before it gives up on the container (the runner's alarm should end a runaway job
            first; this covers a runner that is stopped or an engine that hangs).
        engines: the Docker engines to run on (addresses, :mod:`.engines`: ``local``,
            ``tcp://HOST:2376?tls=DIR``, ``ssh://USER@HOST``; several: placement by load,
            :mod:`.engine_set`); ``None``: ``$MTE_ENGINES``, else this machine's engine.
        provider: a :class:`~.provider.Provider` to use instead (``engines`` is then ignored);
            refused unless it declares the hardening untrusted code needs.
    """

    name = "docker"
    _registry: ClassVar[SharedPools[DockerSandbox]]

    def __init__(
        self,
        image: str = IMAGE,
        size: int | None = None,
        memory_mb: int = 512,
        cpus: float = 1.0,
        pids_limit: int = 64,
        tmpfs_mb: int = 64,
        max_uses: int = 500,
        transport: str = "stdin",
        max_waiting: int | None = None,
        guard_slack_s: float = 15.0,
        engines: Sequence[str] | str | None = None,
        provider: Provider | None = None,
    ) -> None:
        if transport not in ("stdin", "archive"):
            raise ValueError(f"transport must be 'stdin' or 'archive', not {transport!r}")
        if size is not None and size < 1:
            raise ValueError(f"size must be a positive number of containers, got {size}")
        if max_waiting is not None and max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0 or None, got {max_waiting}")
        self.image = image
        self.size = default_pool_size() if size is None else int(size)
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.pids_limit = pids_limit
        self.tmpfs_mb = tmpfs_mb
        self.max_uses = max_uses
        self.transport = transport
        self.max_waiting = max_waiting
        self.guard_slack_s = float(guard_slack_s)
        if isinstance(engines, str):
            engines = (engines,)
        self.engines: tuple[str, ...] | None = None if engines is None else tuple(engines)
        self._provider = provider
        self._lock = threading.Lock()
        self._idle: collections.deque[_Worker] = collections.deque()
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._all: dict[str, _Worker] = {}
        self._creating = 0
        self._started = False
        self._closed = False
        self._shared = False
        self._pid = os.getpid()
        self._runs = 0
        self._wait_s = 0.0
        self._most_waiting = 0

    # -- the process's shared pool ----------------------------------------------------------------

    @classmethod
    def shared(cls, **options: Any) -> DockerSandbox:
        """The process-wide pool for these options, created on first use.

        Every caller with the same options gets the same pool (``size`` is resolved first, so
        ``size=None`` and the machine's default are one pool). Its :meth:`close` does nothing:
        the pool outlives its users and is closed at interpreter exit, or by
        :meth:`shutdown_shared`. A forked child gets its own pool, never its parent's.
        Tests and benchmarks that want a pool of their own construct ``DockerSandbox(...)``.
        """
        if "provider" in options:
            raise TypeError(
                "a shared pool makes its own provider; pass provider= to a private pool"
            )
        if options.get("size") is None:
            options["size"] = default_pool_size()
        if isinstance(options.get("engines"), (list, str)):
            engines = options["engines"]
            options["engines"] = (engines,) if isinstance(engines, str) else tuple(engines)
        return cls._registry.get(options)

    @classmethod
    def shutdown_shared(cls) -> None:
        """Close every shared pool of this process (their containers are removed). A later
        :meth:`shared` starts a new one."""
        cls._registry.shutdown()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def is_shared(self) -> bool:
        return self._shared

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("this DockerSandbox is closed")
            if self._started:
                return
            if self._provider is None:
                from multiturn_envs.sandbox.engine_set import EngineSet

                self._provider = EngineSet(self.engines)
            require(
                self._provider,
                UNTRUSTED_CODE | {Capability.LONG_LIVED_PROCESS},
                "untrusted code (the code sandbox)",
            )
            self._provider.ensure_image(self.image)  # ImageMissing names the build command
            atexit.register(self._shutdown)
            self._started = True

    @property
    def provider(self) -> Provider:
        """Where this pool's containers run (started on first use)."""
        self._start()
        assert self._provider is not None
        return self._provider

    def box_spec(self) -> BoxSpec:
        """What each container of this pool is made of (:mod:`.hardening`)."""
        limits = ContainerLimits(self.memory_mb, self.cpus, self.pids_limit, self.tmpfs_mb)
        return BoxSpec(self.image, limits, job_volume=True)

    def hardened_container(self) -> Box:
        """A new container with this pool's hardening, limits and the runner installed; no
        session, not part of the pool (the caller closes it). The pool's own containers are
        made here, and so are the benchmark's."""
        box = self.provider.create(self.box_spec())
        try:
            install_runner(box)
        except BaseException:
            box.close()
            raise
        return box

    def _create(self) -> _Worker:
        worker = _Worker(self.hardened_container())
        with self._lock:
            self._all[worker.box.id] = worker
        try:
            stream = worker.box.process(
                RunnerSession.RUNNER, user=f"{CODE_UID}:{CODE_UID}", workdir="/tmp"
            )
            worker.session = RunnerSession(stream)
        except Exception:
            self._discard(worker)
            raise
        return worker

    def _acquire(self) -> _Worker:
        """An idle container, a new one while the pool is below ``size``, or wait for one.

        Waiters are served strictly in arrival order, by direct hand-over: a released
        container (or the room a discarded one leaves) goes to the longest waiter, and only
        that waiter's thread is woken. (Waking every waiter to let the head through costs a
        context switch per waiter per release: with 64 waiters on a loaded 2-core machine that
        alone took a few hundred ms per submission.)
        """
        self._start()
        waiter: _Waiter | None = None
        with self._lock:
            if self._closed:
                raise RuntimeError("this DockerSandbox is closed")
            if not self._waiters and self._idle:
                return self._idle.popleft()
            if not self._waiters and len(self._all) + self._creating < self.size:
                self._creating += 1
            else:
                if self.max_waiting is not None and len(self._waiters) >= self.max_waiting:
                    raise PoolSaturated(
                        f"the sandbox pool is saturated: {len(self._waiters)} submissions "
                        f"already wait for its {self.size} containers "
                        f"(max_waiting={self.max_waiting})"
                    )
                waiter = _Waiter()
                self._waiters.append(waiter)
                self._most_waiting = max(self._most_waiting, len(self._waiters))
        if waiter is not None:
            arrived = time.monotonic()
            waiter.ready.wait()  # set by a hand-over or by close
            with self._lock:
                self._wait_s += time.monotonic() - arrived
            if waiter.worker is not None:
                return waiter.worker
            if not waiter.create:
                raise RuntimeError("this DockerSandbox is closed")
        try:
            return self._create()
        finally:
            with self._lock:
                self._creating -= 1
                self._hand_over()  # a failed start leaves its room to the next waiter

    def _hand_over(self) -> None:
        """Give idle containers, then room for new ones, to the longest waiters (under the
        lock). A closed pool wakes every waiter with nothing."""
        while self._waiters:
            if self._closed:
                self._waiters.popleft().ready.set()
            elif self._idle:
                waiter = self._waiters.popleft()
                waiter.worker = self._idle.popleft()
                waiter.ready.set()
            elif len(self._all) + self._creating < self.size:
                waiter = self._waiters.popleft()
                self._creating += 1
                waiter.create = True
                waiter.ready.set()
            else:
                return

    def _release(self, worker: _Worker, healthy: bool) -> None:
        worker.uses += 1
        with self._lock:
            self._runs += 1
            if healthy and worker.uses < self.max_uses and not self._closed:
                self._idle.append(worker)
                self._hand_over()
                return
        self._discard(worker)

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._all.pop(worker.box.id, None)
            self._hand_over()  # room for a new container
        if worker.session is not None:
            worker.session.close()
        worker.box.close()  # the engine's reaper removes it

    def close(self) -> None:
        """Remove every container of this pool (by id). Idempotent.

        Does nothing on the shared pool (:meth:`shared`): other env instances use it; it is
        closed at interpreter exit or by :meth:`shutdown_shared`.
        """
        if not self._shared:
            self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._all.values())
            self._idle.clear()
            self._hand_over()  # waiters learn the pool is closed
        if os.getpid() == self._pid:  # a forked child never removes its parent's containers
            for worker in workers:
                self._discard(worker)
            wait_removed([w.box for w in workers])
        if self._started:
            atexit.unregister(self._shutdown)

    def container_ids(self) -> list[str]:
        """The ids of this pool's live containers."""
        with self._lock:
            return list(self._all)

    def stats(self) -> dict[str, float]:
        """The pool's state and totals: ``size``, ``containers`` (live), ``idle``, ``waiting``
        (submissions queued now), ``most_waiting`` (the longest queue seen), ``runs`` and
        ``wait_s`` (seconds submissions spent queued, summed)."""
        with self._lock:
            return {
                "size": self.size,
                "containers": len(self._all),
                "idle": len(self._idle),
                "waiting": len(self._waiters),
                "most_waiting": self._most_waiting,
                "runs": self._runs,
                "wait_s": self._wait_s,
            }

    def footprint(self) -> dict[str, int]:
        """Memory in use per container (bytes, from the engine's cgroup statistics)."""
        sizes = {}
        with self._lock:
            boxes = [w.box for w in self._all.values()]
        for box in boxes:
            cid = box.id
            with contextlib.suppress(Exception):
                stats = box.api.stats(cid, stream=False, one_shot=True)  # type: ignore[attr-defined]
                mem = stats.get("memory_stats", {})
                cache = mem.get("stats", {}).get("cache", 0)
                sizes[cid] = int(mem.get("usage", 0)) - int(cache)
        return sizes

    # -- running --------------------------------------------------------------------------------

    def run(
        self, program: str, tests: Sequence[TestCase], limits: RunLimits | None = None
    ) -> RunResult:
        limits = limits or RunLimits()
        last_error = ""
        for _attempt in range(2):  # one retry on a fresh container when the engine misbehaves
            try:
                worker = self._acquire()
            except MissingCapability:
                raise  # a refused provider is the caller's configuration, never a run's result
            except RuntimeError as exc:
                return RunResult(results=(), backend=self.name, error=str(exc))
            except Exception as exc:
                last_error = f"could not start a sandbox container: {exc}"
                continue
            try:
                result, healthy = self._execute(worker, program, tests, limits)
            except Exception as exc:
                self._release(worker, healthy=False)
                last_error = f"the docker engine failed: {type(exc).__name__}: {exc}"
                continue
            self._release(worker, healthy)
            return result
        return RunResult(results=(), backend=self.name, error=last_error)

    def submission_job(self, program: str, tests: Sequence[TestCase], limits: RunLimits) -> bytes:
        """The job this pool's runner gets for one submission (the benchmark sends it too).

        With ``transport="stdin"`` the program travels inside the job; with ``"archive"`` it is
        a file beside the job in ``/job/work``.
        """
        stdin = self.transport == "stdin"
        return b"".join(
            job_bytes(
                "/tmp/program.py" if stdin else "/job/work/program.py",
                SCRATCH,
                tests,
                limits,
                kill_all=True,
                guard_s=guard_seconds(limits, len(tests)),
                program_source=program if stdin else None,
                wipe=WIPE,
            )
        )

    def _execute(
        self, worker: _Worker, program: str, tests: Sequence[TestCase], limits: RunLimits
    ) -> tuple[RunResult, bool]:
        session = worker.session
        if session is None or not session.idle_and_alive():
            raise RuntimeError("the container's runner session ended while idle")
        guard = guard_seconds(limits, len(tests))
        job = self.submission_job(program, tests, limits)
        if self.transport == "stdin":
            request = job
        else:
            worker.box.put_archive("/job", _job_archive(program, job))
            request = header_frame({"job_file": "/job/work/job.jsonl"})
        started = time.time()
        with contextlib.suppress(OSError):  # a session that died since: read_report sees it
            session.send(request)
        # host-side guard: the runner's own alarm (guard_s) should end a runaway job first
        bound = report_bytes(limits, len(tests))
        stdout, stderr, ended = session.read_report(guard + self.guard_slack_s, bound)
        report = stdout.decode("utf-8", "replace")
        died: str | None = None
        if ended == "hung":
            died = "the sandbox did not answer within its time guard"
        elif ended == "flood":
            died = (
                f"the runner's output passed its bound ({bound:,} bytes of report, "
                f"{RUNNER_STDERR_CAP:,} on its stderr)"
            )
        elif ended == "eof":
            exit_code = session.exit_code()
            if worker.box.oom_since(started):
                died = "the container ran out of memory"
            elif exit_code in (137, 142, -9, None):
                died = "the runner was killed (its overall time guard, memory, or the program)"
            else:
                tail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
                died = f"the runner exited with status {exit_code} {tail[0]}".strip()
        return parse_report(report, tests, self.name, died), died is None


def _make_shared(options: dict[str, Any]) -> DockerSandbox:
    pool = DockerSandbox(**options)
    pool._shared = True
    return pool


DockerSandbox._registry = SharedPools(
    _make_shared, lambda pool: pool.closed, DockerSandbox._shutdown
)
