"""One Docker engine as a container provider (:mod:`.provider`): boxes, a creation-rate limit, a
reaper, and a clear error when the engine goes away.

:class:`DockerEngine` reaches its engine through :func:`~multiturn_envs.sandbox.engines.connect`
(this machine's, TCP with TLS, SSH) and owns every container it creates in this process:

* **creation** turns a :class:`~multiturn_envs.sandbox.provider.BoxSpec` into a hardened
  container (:mod:`.hardening` holds what each flag means), labelled with the owner process, at
  most ``rate`` per second across the machine's processes (:mod:`.creation_rate`);
* **the reaper** (one thread per engine) removes the containers callers ``close``: a close
  returns at once and cannot be cut halfway by a cancellation; a removal that fails because the
  engine is away is kept and retried when it answers again; at the first connection, labelled
  containers of dead owner processes on that engine are removed (:mod:`.orphans`); at exit,
  every container still held is removed;
* **an engine that stops answering** mid-use (killed, its host or link gone) turns the failing
  call into :class:`~multiturn_envs.sandbox.provider.EngineGone`, naming the engine, and marks
  it gone: :class:`~multiturn_envs.sandbox.engine_set.EngineSet` places nothing there until it
  answers again.

Every process has one :class:`DockerEngine` per address (:meth:`DockerEngine.shared`): one client
and one reaper per engine, however many pools and envs use it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, ClassVar

from multiturn_envs.sandbox.archive_stream import read_archive
from multiturn_envs.sandbox.creation_rate import CreationRate
from multiturn_envs.sandbox.engines import EngineAddress, connect
from multiturn_envs.sandbox.exec_session import ExecStream, oom_killed
from multiturn_envs.sandbox.hardening import KEEPALIVE_UID
from multiturn_envs.sandbox.orphans import LABEL, OWNER_LABEL, owner_tag, reap_orphans
from multiturn_envs.sandbox.provider import (
    BoxSpec,
    Capability,
    EngineGone,
    ExecResult,
)

__all__ = ["ENGINE_LABEL", "DockerBox", "DockerEngine"]

ENGINE_LABEL = "multiturn-envs.engine"
"""Label naming the engine a container was placed on (what a test or an operator reads)."""
GONE_RETRY_S = 10.0
"""How long an engine that stopped answering is left out of placement before it is asked again."""
PING_TIMEOUT_S = 5.0
REMOVAL_RETRY_S = 5.0

DOCKER_CAPABILITIES = frozenset(
    {
        Capability.NO_NETWORK,
        Capability.READ_ONLY_ROOT,
        Capability.DROPPED_PRIVILEGES,
        Capability.SEPARATE_UIDS,
        Capability.PIDS_LIMIT,
        Capability.MEMORY_LIMIT,
        Capability.CPU_LIMIT,
        Capability.OOM_EVENTS,
        Capability.TMPFS_VOLUMES,
        Capability.LONG_LIVED_PROCESS,
        Capability.NATIVE_SNAPSHOT,
    }
)
"""What a Docker engine enforces on the boxes it makes (each flag: :mod:`.hardening`)."""


def _mounts(spec: BoxSpec) -> list[Any]:
    from docker.types import DriverConfig, Mount

    mounts = [Mount("/job", None, type="volume")] if spec.job_volume else []
    for volume in spec.volumes:
        options = (
            f"size={int(volume.size_mb)}m,uid={volume.uid},gid={volume.gid},"
            f"mode={volume.mode & 0o7777:04o},nosuid,nodev"
        )
        mounts.append(
            Mount(
                volume.path,
                None,
                type="volume",
                driver_config=DriverConfig(
                    "local", {"type": "tmpfs", "device": "tmpfs", "o": options}
                ),
            )
        )
    return mounts


class DockerBox:
    """A container on a :class:`DockerEngine` (the :class:`~.provider.Box` protocol)."""

    def __init__(self, engine: DockerEngine, container_id: str) -> None:
        self.id = container_id
        self.owner = engine
        self.engine = engine.name
        self.closed = False

    @property
    def api(self) -> Any:
        return self.owner.api

    @property
    def gone(self) -> bool:
        """Whether its engine is marked gone (asked without a call)."""
        return self.owner.gone

    def exec(
        self,
        command: Sequence[str],
        *,
        user: str,
        workdir: str = "/",
        environment: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        output_cap: int = 1 << 20,
    ) -> ExecResult:
        """Run ``command`` to its end: its status, the last ``output_cap`` bytes of its output
        (both streams: an error is at the end), ``timed_out`` when it outlived ``timeout_s``
        (the wait ends; the engine cannot kill an exec, so the process is the caller's to
        kill)."""
        with self.owner.calls():
            stream = ExecStream(
                self.api,
                self.id,
                command,
                user=user,
                workdir=workdir,
                environment=environment,
                stdin=False,
            )
        out = bytearray()
        truncated = False
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                data = stream.read(deadline)
                if data is None:
                    return ExecResult(None, bytes(out), truncated, timed_out=True)
                if not data:
                    break
                out.extend(data)
                if len(out) > output_cap:
                    del out[: len(out) - output_cap]
                    truncated = True
        finally:
            stream.close()
        with self.owner.calls():
            code = stream.exit_code()
        return ExecResult(code, bytes(out), truncated)

    def process(
        self,
        command: Sequence[str],
        *,
        user: str,
        workdir: str = "/",
        environment: Mapping[str, str] | None = None,
    ) -> ExecStream:
        """A long-lived process with stdin open (:class:`~.exec_session.ExecStream`)."""
        with self.owner.calls():
            return ExecStream(
                self.api, self.id, command, user=user, workdir=workdir, environment=environment
            )

    def put_archive(self, path: str, data: bytes) -> None:
        with self.owner.calls():
            if not self.api.put_archive(self.id, path, data):
                raise RuntimeError(f"put_archive into {path} failed")

    def get_archive(self, path: str, out: IO[bytes], cap_bytes: int) -> int:
        """Stream a tar of ``path`` into ``out``, refused past ``cap_bytes`` as each header
        arrives (:func:`~.archive_stream.read_archive`)."""
        with self.owner.calls():
            return read_archive(self.api, self.id, path, out, cap_bytes)

    def snapshot(self, tag: str) -> str | None:
        """``docker commit`` (skips tmpfs volumes: the envs' snapshots never rely on it)."""
        repository, _, version = tag.rpartition(":")
        with self.owner.calls():
            result = self.api.commit(self.id, repository=repository or tag, tag=version or None)
        return str(result.get("Id", "")) or None

    def oom_since(self, since: float) -> bool:
        return oom_killed(self.api, self.id, since)

    def alive(self) -> bool:
        try:
            with self.owner.calls():
                state = self.api.inspect_container(self.id).get("State") or {}
        except Exception:
            return False
        return bool(state.get("Running"))

    def close(self) -> None:
        """Hand the container to its engine's reaper (returns at once; idempotent)."""
        if not self.closed:
            self.closed = True
            self.owner.remove(self.id)


class DockerEngine:
    """One Docker engine (module docstring); a :class:`~.provider.Provider`.

    Args:
        address: the engine (an :class:`~.engines.EngineAddress` or its text).
        connect_timeout_s: the client's timeout per call.
    """

    capabilities: frozenset[Capability] = DOCKER_CAPABILITIES
    _shared: ClassVar[dict[tuple[str, int], DockerEngine]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, address: EngineAddress | str = "local", timeout_s: float = 120.0) -> None:
        self.address = (
            address if isinstance(address, EngineAddress) else EngineAddress.parse(address)
        )
        self.name = self.address.label
        self.timeout_s = float(timeout_s)
        self.owner = owner_tag()
        self.rate = CreationRate(self.address.endpoint, self.address.creation_rate)
        self._lock = threading.Lock()  # the box bookkeeping; never held across an engine call
        self._connect_lock = threading.Lock()
        self._image_lock = threading.Lock()  # one image check or transfer at a time
        self._client: Any = None
        self._close_client: Any = None
        self._cpus = 1
        self._boxes: set[str] = set()
        self._removals: queue.Queue[str | None] = queue.Queue()
        self._failed: set[str] = set()
        self._reaper: threading.Thread | None = None
        self._gone_at: float | None = None
        self._closed = False
        self._images: dict[str, str] = {}  # image -> the local id it was made current with
        self._pid = os.getpid()

    # ------------------------------------------------------------------ sharing
    @classmethod
    def shared(cls, address: EngineAddress | str = "local") -> DockerEngine:
        """This process's one :class:`DockerEngine` for ``address`` (closed at exit)."""
        parsed = address if isinstance(address, EngineAddress) else EngineAddress.parse(address)
        key = (str(parsed), os.getpid())
        with cls._shared_lock:
            engine = cls._shared.get(key)
            if engine is None or engine._closed:
                engine = cls(parsed)
                cls._shared[key] = engine
            return engine

    @classmethod
    def close_shared(cls) -> None:
        """Close every shared engine of this process (their containers are removed)."""
        with cls._shared_lock:
            engines = [e for (_, pid), e in cls._shared.items() if pid == os.getpid()]
            cls._shared.clear()
        for engine in engines:
            engine.close()

    # ------------------------------------------------------------------ the connection
    @property
    def client(self) -> Any:
        """The ``docker.DockerClient``, connected on first use (``RuntimeError`` naming the
        engine and the fix when it does not answer).

        The connection (up to ``timeout_s``) and the orphan sweep run under their own lock, not
        the bookkeeping one: placement reads every engine's box count, and one engine that is
        slow to answer must not stall it on the others."""
        if self._closed:
            raise RuntimeError(f"the engine {self.name} is closed in this process")
        client = self._client
        if client is not None:
            return client
        with self._connect_lock:
            if self._client is None:
                self._connect()
            return self._client

    def _connect(self) -> None:
        """Connect, sweep the engine's orphans and start the reaper (under ``_connect_lock``)."""
        from multiturn_envs.sandbox.engine import ENGINE_HINT

        try:
            client, closer = connect(self.address, self.timeout_s, max_pool_size=32)
        except RuntimeError as exc:
            self._gone_at = time.monotonic()
            hint = f"; start one: {ENGINE_HINT}" if self.address.scheme == "local" else ""
            raise RuntimeError(f"{exc}{hint}") from exc
        with contextlib.suppress(Exception):
            self._cpus = max(1, int(client.info().get("NCPU") or 1))
        self._gone_at = None
        with contextlib.suppress(Exception):
            reap_orphans(client)
        with self._lock:
            if self._closed:  # closed while connecting: nothing of ours runs there yet
                closer()
                raise RuntimeError(f"the engine {self.name} is closed in this process")
            self._client, self._close_client = client, closer
            self._reaper = threading.Thread(
                target=self._reap, name=f"reaper {self.name}", daemon=True
            )
            self._reaper.start()
        atexit.register(self.close)

    @property
    def api(self) -> Any:
        return self.client.api

    @property
    def capacity(self) -> int:
        """Containers placement may put here at once: ``capacity=`` of the address, else the
        engine's CPUs (asked at connect)."""
        if self.address.capacity is not None:
            return self.address.capacity
        return self._cpus

    @property
    def gone(self) -> bool:
        """Marked gone less than :data:`GONE_RETRY_S` ago (no call is made)."""
        gone_at = self._gone_at
        return gone_at is not None and time.monotonic() - gone_at < GONE_RETRY_S

    def answers(self, timeout_s: float = PING_TIMEOUT_S) -> bool:
        """One ``/_ping`` within ``timeout_s``; marks the engine gone or back."""
        client = self._client
        if client is None:
            try:
                client = self.client
            except RuntimeError:
                return False
        try:
            response = client.api._get(client.api._url("/_ping"), timeout=timeout_s)
            ok = bool(response.status_code == 200)
        except Exception:
            ok = False
        self._gone_at = None if ok else time.monotonic()
        return ok

    @contextlib.contextmanager
    def calls(self) -> Iterator[None]:
        """Around engine calls: a failure while the engine does not answer becomes
        :class:`~.provider.EngineGone` (other failures pass through unchanged)."""
        try:
            yield
        except EngineGone:
            raise
        except Exception as exc:
            if self._is_engine_error(exc) and not self.answers():
                raise EngineGone(self.name, f"{type(exc).__name__}: {str(exc)[:200]}") from exc
            raise

    @staticmethod
    def _is_engine_error(exc: BaseException) -> bool:
        import docker

        if isinstance(exc, docker.errors.NotFound):
            return False
        return not isinstance(exc, docker.errors.ImageNotFound)

    # ------------------------------------------------------------------ boxes
    def create(self, spec: BoxSpec) -> DockerBox:
        """A new hardened container of ``spec`` (module docstring); the caller closes it."""
        from docker.types import Ulimit

        client = self.client
        if self.gone and not self.answers():
            raise EngineGone(self.name, "it did not answer a moment ago")
        self.rate.wait()
        ulimits = [Ulimit(name="nofile", soft=256, hard=256)]
        if spec.fsize_mb is not None:
            size = int(spec.fsize_mb) << 20
            ulimits.append(Ulimit(name="fsize", soft=size, hard=size))
        limits = spec.limits
        scratch = (
            {"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"}
            if spec.scratch is None
            else dict(spec.scratch)
        )
        with self.calls():
            container = client.containers.run(
                spec.image,
                list(spec.keepalive) if spec.keepalive else ["sleep", "infinity"],
                detach=True,
                init=not spec.keepalive,
                user="0:0" if spec.keepalive else f"{KEEPALIVE_UID}:{KEEPALIVE_UID}",
                network_mode="none",
                read_only=True,
                tmpfs=scratch,
                mounts=_mounts(spec),
                cap_drop=["ALL"],
                cap_add=list(spec.cap_add) or None,
                security_opt=["no-new-privileges"],
                pids_limit=limits.pids_limit,
                mem_limit=f"{limits.memory_mb}m",
                memswap_limit=f"{limits.memory_mb}m",
                nano_cpus=int(limits.cpus * 1e9),
                ulimits=ulimits,
                labels={
                    LABEL: "1",
                    OWNER_LABEL: self.owner,
                    ENGINE_LABEL: self.name,
                    **spec.labels,
                },
                environment={"LANG": "C.UTF-8"},
                working_dir="/",
            )
        with self._lock:
            self._boxes.add(container.id)
        return DockerBox(self, container.id)

    def live_boxes(self) -> int:
        with self._lock:
            return len(self._boxes)

    def box_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._boxes)

    def ensure_image(self, image: str) -> None:
        """``image`` present and current here, sent from this machine's engine when it is not
        (:func:`~.image_transfer.make_current`); checked once per image and process, one check
        or transfer at a time (two cold creations send an image once)."""
        if image in self._images:
            return
        from multiturn_envs.sandbox.image_transfer import make_current

        with self._image_lock:
            if image not in self._images:
                local = None if self.address.scheme == "local" else DockerEngine.shared("local")
                self._images[image] = make_current(self, image, local)

    # ------------------------------------------------------------------ removal
    def remove(self, container_id: str) -> None:
        """Queue the container for removal by the reaper (returns at once)."""
        with self._lock:
            known = container_id in self._boxes
        if known and not self._closed:
            self._removals.put(container_id)
        elif known:
            self._remove_now(container_id)

    def _remove_now(self, container_id: str) -> bool:
        import docker

        client = self._client
        if client is None:
            return False
        try:
            client.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except Exception:
            return False
        with self._lock:
            self._boxes.discard(container_id)
        return True

    def _reap(self) -> None:
        while True:
            try:
                item = self._removals.get(timeout=REMOVAL_RETRY_S)
            except queue.Empty:
                item = ""
            if item is None:
                return
            if item and not self._remove_now(item):
                self._failed.add(item)
            if self._failed and (not item or self._removals.empty()) and self.answers(2.0):
                for cid in list(self._failed):
                    if self._remove_now(cid):
                        self._failed.discard(cid)

    def close(self) -> None:
        """Remove every container this engine made in this process (bounded waits), stop the
        reaper, close the client. Idempotent; a forked child removes nothing of its parent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = sorted(self._boxes)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._reaper is not None:
            self._removals.put(None)
            self._reaper.join(timeout=60)
        if os.getpid() == self._pid and self._client is not None:
            for cid in pending:
                self._remove_now(cid)
        if self._close_client is not None:
            self._close_client()
