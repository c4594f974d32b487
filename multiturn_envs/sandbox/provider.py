"""The container substrate's one small protocol: what a place that runs containers must offer.

Both sandboxed envs run on it: DeepCoder-MT's runner pool (:mod:`.docker_pool`) and
MT/Terminal-v0's shell and checker (:mod:`.shell_session`, :mod:`.checker`). A **provider**
creates **boxes** (containers) from a :class:`BoxSpec` and declares its
:class:`Capability` set; a box offers

* ``exec``: run a command to its end, with a timeout and an output cap;
* ``process``: a long-lived process with an attached stdin/stdout stream (the runner's session,
  the agent's shell);
* ``put_archive`` / ``get_archive``: a tar into / out of a path, the read bounded by a byte cap
  checked on every tar header as it arrives (a huge or sparse file is refused before its data);
* ``snapshot``: a native snapshot of the box, where the provider has one (optional: the envs'
  exact snapshots never need it, they are the writable directories' tars plus host-side state);
* ``alive`` and ``close``; ``close`` hands the removal to the provider's reaper and returns at
  once, so a caller cancelled halfway (an ``asyncio`` task, a ``KeyboardInterrupt``) cannot
  leave a container behind.

Implementations: :class:`~multiturn_envs.sandbox.docker_engine.DockerEngine` (one Docker
engine: this machine's, one over TCP+TLS, one over SSH) and
:class:`~multiturn_envs.sandbox.engine_set.EngineSet` (several engines, placement by load).
A hosted provider (Modal, Daytona, E2B, a Kubernetes cluster) plugs in by implementing
:class:`Provider` and :class:`Box` and declaring honestly what it enforces
(docs/sandbox-scale-out.md lists what each capability must mean).

**Hardening is a declared contract, checked before any untrusted code runs**: an env states the
capabilities it needs (:data:`UNTRUSTED_CODE` and its own), and :func:`require` refuses a
provider that lacks one, with a message naming each missing capability and what it protects
against. Nothing falls back silently to a weaker box.

The protocol was shaped after reading the others' (Harbor's ``BaseEnvironment``: start, exec,
upload/download, stop; inspect_ai's ``SandboxEnvironment``: exec with a timeout and output
limit, read/write file; rLLM's sandbox protocol and warm queues; verifiers' runtimes with a
creation-rate limiter). What none of them has, and this one keeps: a box whose state can be
read and put back exactly (archives with owners, modes and times), so a mid-episode snapshot
taken on one provider restores on another.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol, runtime_checkable

__all__ = [
    "CAPABILITY_MEANING",
    "UNTRUSTED_CODE",
    "Box",
    "BoxSpec",
    "Capability",
    "EngineGone",
    "ExecResult",
    "MissingCapability",
    "ProcessStream",
    "Provider",
    "ResourceLimits",
    "TmpfsVolume",
    "require",
]


class Capability(str, enum.Enum):
    """What a provider enforces on every box it creates (see :data:`CAPABILITY_MEANING`)."""

    NO_NETWORK = "no-network"
    READ_ONLY_ROOT = "read-only-root"
    DROPPED_PRIVILEGES = "dropped-privileges"
    SEPARATE_UIDS = "separate-uids"
    PIDS_LIMIT = "pids-limit"
    MEMORY_LIMIT = "memory-limit"
    CPU_LIMIT = "cpu-limit"
    OOM_EVENTS = "oom-events"
    TMPFS_VOLUMES = "tmpfs-volumes"
    LONG_LIVED_PROCESS = "long-lived-process"
    NATIVE_SNAPSHOT = "native-snapshot"


CAPABILITY_MEANING: Mapping[Capability, str] = {
    Capability.NO_NETWORK: "no network interface but loopback (no exfiltration, no downloads)",
    Capability.READ_ONLY_ROOT: "a read-only root filesystem: only the spec's scratch and "
    "volumes are writable",
    Capability.DROPPED_PRIVILEGES: "every Linux capability dropped but those the spec lists, and "
    "no-new-privileges (no setuid escalation)",
    Capability.SEPARATE_UIDS: "processes run as a uid chosen per exec, and the box's keep-alive "
    "under another one, so `kill -9 -1` by the code cannot end the box",
    Capability.PIDS_LIMIT: "a cap on the box's processes (fork bombs stop there)",
    Capability.MEMORY_LIMIT: "a memory cap with no swap, over the whole box",
    Capability.CPU_LIMIT: "a CPU quota per box",
    Capability.OOM_EVENTS: "out-of-memory kills reported to the host (a memory kill is told "
    "from a crash)",
    Capability.TMPFS_VOLUMES: "size-capped tmpfs volumes whose pages count against the box's "
    "memory (writable directories that never touch a disk)",
    Capability.LONG_LIVED_PROCESS: "a process with an attached stdin/stdout stream that lives "
    "between calls (the runner's session, the agent's shell)",
    Capability.NATIVE_SNAPSHOT: "a snapshot of the whole box by the provider itself",
}

UNTRUSTED_CODE: frozenset[Capability] = frozenset(
    {
        Capability.NO_NETWORK,
        Capability.READ_ONLY_ROOT,
        Capability.DROPPED_PRIVILEGES,
        Capability.SEPARATE_UIDS,
        Capability.PIDS_LIMIT,
        Capability.MEMORY_LIMIT,
        Capability.CPU_LIMIT,
        Capability.OOM_EVENTS,
    }
)
"""The hardening every env that runs a model's code requires (docs/sandbox.md's security
model)."""


class MissingCapability(RuntimeError):
    """A provider lacks capabilities an env requires; ``missing`` names them."""

    def __init__(self, provider: str, purpose: str, missing: Iterable[Capability]) -> None:
        self.provider = provider
        self.missing = tuple(sorted(missing, key=lambda c: c.value))
        lines = "; ".join(f"{c.value} ({CAPABILITY_MEANING[c]})" for c in self.missing)
        super().__init__(
            f"the sandbox provider {provider!r} is refused for {purpose}: it does not provide "
            f"{lines}"
        )


class EngineGone(RuntimeError):
    """The engine (or provider) a box lived on stopped answering mid-use. Its boxes are lost;
    an env's last snapshot restores on another engine (``env.set_state``)."""

    def __init__(self, engine: str, why: str) -> None:
        self.engine = engine
        super().__init__(
            f"the Docker engine {engine} went away ({why}); what ran there is lost. An "
            "episode continues on another engine from its last snapshot (env.set_state), and "
            "the engine is left out of placement until it answers again"
        )


def require(provider: Provider, needed: Iterable[Capability], purpose: str) -> None:
    """Refuse ``provider`` for ``purpose`` (e.g. "untrusted code in MT/DeepCoder-v0") unless it
    declares every capability in ``needed``; :class:`MissingCapability` names what is missing."""
    missing = set(needed) - set(provider.capabilities)
    if missing:
        raise MissingCapability(provider.name, purpose, missing)


@dataclass(frozen=True)
class ResourceLimits:
    """A box's resource limits: memory (swap included), CPU quota, processes, the default
    ``/tmp`` scratch's size."""

    memory_mb: int = 512
    cpus: float = 1.0
    pids_limit: int = 64
    tmpfs_mb: int = 64


@dataclass(frozen=True)
class TmpfsVolume:
    """A size-capped tmpfs volume at ``path`` (exec allowed, ``nosuid,nodev``), its root owned
    by ``uid:gid`` with ``mode``; removed with its box."""

    path: str
    size_mb: int
    uid: int = 0
    gid: int = 0
    mode: int = 0o755


@dataclass(frozen=True)
class BoxSpec:
    """What a box is made of: the image, the limits, the writable places, who runs pid 1.

    Attributes:
        image: the image (present and current on the provider: ``Provider.ensure_image``).
        limits: memory, CPU, processes, the default scratch size.
        volumes: tmpfs volumes (the only writable places besides ``scratch``).
        scratch: ``--tmpfs`` mounts (path -> mount options); ``None``: the default ``/tmp``
            of ``limits.tmpfs_mb``; ``{}``: none (a volume provides ``/tmp``).
        job_volume: an anonymous volume at ``/job`` (the code runner's home).
        cap_add: capabilities kept (all others dropped).
        fsize_mb: ``RLIMIT_FSIZE`` of every process (no file, sparse or not, grows past it).
        keepalive: pid 1 as root instead of the provider's init with ``sleep infinity`` under
            the keep-alive uid (a box whose execs need ``cap_add`` runs such a command: it must
            reap orphans and not be dumpable).
        labels: extra labels.
    """

    image: str
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    volumes: tuple[TmpfsVolume, ...] = ()
    scratch: Mapping[str, str] | None = None
    job_volume: bool = False
    cap_add: tuple[str, ...] = ()
    fsize_mb: int | None = None
    keepalive: tuple[str, ...] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    """A finished ``exec``: its status (``None`` when it did not end before the timeout), its
    output (stdout and stderr interleaved; the last ``output_cap`` bytes) and whether any was
    cut."""

    exit_code: int | None
    output: bytes
    truncated: bool = False
    timed_out: bool = False


@runtime_checkable
class ProcessStream(Protocol):
    """A long-lived process's attached stream (an exec with stdin open)."""

    closed: bool

    def send(self, data: bytes) -> None: ...

    def read(self, deadline: float) -> bytes | None:
        """Both streams' next bytes; ``b""`` at the end, ``None`` at ``deadline``
        (``time.monotonic``)."""
        ...

    def read_frames(self, deadline: float) -> list[tuple[int, bytes]] | None:
        """The next ``(stream, bytes)`` pieces (1 stdout, 2 stderr); ``[]`` at the end,
        ``None`` at ``deadline``."""
        ...

    def unread(self, frames: Sequence[tuple[int, bytes]]) -> None:
        """Put frames back at the head of the stream."""
        ...

    def idle_and_alive(self) -> bool:
        """Whether the process is still there with nothing unread, asked without a call."""
        ...

    def exit_code(self) -> int | None: ...

    def close(self) -> None: ...


@runtime_checkable
class Box(Protocol):
    """A container made by a :class:`Provider` (module docstring)."""

    id: str
    engine: str
    """The name of the engine (or provider) it lives on."""

    def exec(
        self,
        command: Sequence[str],
        *,
        user: str,
        workdir: str = "/",
        environment: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        output_cap: int = 1 << 20,
    ) -> ExecResult: ...

    def process(
        self,
        command: Sequence[str],
        *,
        user: str,
        workdir: str = "/",
        environment: Mapping[str, str] | None = None,
    ) -> ProcessStream: ...

    def put_archive(self, path: str, data: bytes) -> None: ...

    def get_archive(self, path: str, out: IO[bytes], cap_bytes: int) -> int: ...

    def snapshot(self, tag: str) -> str | None:
        """A native snapshot of the box as image ``tag`` (its id), or ``None`` when the
        provider has none."""
        ...

    def oom_since(self, since: float) -> bool: ...

    def alive(self) -> bool: ...

    def close(self) -> None: ...


@runtime_checkable
class Provider(Protocol):
    """A place that makes boxes (module docstring)."""

    name: str
    capabilities: frozenset[Capability]

    def create(self, spec: BoxSpec) -> Box: ...

    def ensure_image(self, image: str) -> None:
        """Make ``image`` present and current on every engine of the provider (raises
        ``RuntimeError`` with the fix when it cannot)."""
        ...

    def live_boxes(self) -> int: ...

    def close(self) -> None: ...
