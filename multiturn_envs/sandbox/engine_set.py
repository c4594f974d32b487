"""Several Docker engines as one provider: each new box goes to the least loaded engine that
answers.

Why: one engine on two cores serves about 30 submissions per second, and a GPU node may have no
engine at all; a run spreads its containers over engines on other machines
(:mod:`.engines` names them: ``tcp://...?tls=``, ``ssh://...``). **Placement by load**: a
new box goes to the engine with the lowest ``running containers / capacity``, where running
containers is the larger of what this process holds there and what the engine itself reports
(asked at most every :data:`LOAD_TTL_S`; other processes and machines use it too), and
capacity is the engine's ``capacity=`` or its CPU count; ties go to the engine listed first.
Each engine keeps its own creation-rate limit and reaper (:mod:`.docker_engine`).

**An engine that goes away** is left out of placement (:data:`~.docker_engine.GONE_RETRY_S`) and
the creation moves to the next engine; a box that lived there is lost, which its user learns as
:class:`~multiturn_envs.sandbox.provider.EngineGone` on its next call, with the rest of the run
going on elsewhere. An env's episode state is restored on another engine from its snapshot
(exact on every engine: the snapshot is the writable directories' tars and host-side state).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from multiturn_envs.sandbox.docker_engine import DockerBox, DockerEngine
from multiturn_envs.sandbox.engines import EngineAddress, parse_engines
from multiturn_envs.sandbox.provider import BoxSpec, Capability, EngineGone

__all__ = ["LOAD_TTL_S", "EngineSet"]

LOAD_TTL_S = 2.0
"""How old an engine's own count of running containers may be when placement reads it."""


class EngineSet:
    """A :class:`~.provider.Provider` over several engines (module docstring).

    Args:
        engines: addresses (text or :class:`~.engines.EngineAddress`); ``None``:
            ``$MTE_ENGINES``, else this machine's engine alone.
    """

    def __init__(self, engines: Iterable[str | EngineAddress] | str | None = None) -> None:
        addresses = parse_engines(engines)
        self.engines: tuple[DockerEngine, ...] = tuple(DockerEngine.shared(a) for a in addresses)
        self.name = " + ".join(e.name for e in self.engines)
        caps = frozenset(Capability)
        for engine in self.engines:
            caps &= engine.capabilities
        self.capabilities: frozenset[Capability] = caps
        self._lock = threading.Lock()
        self._reported: dict[str, tuple[float, int]] = {}
        self.placed: dict[str, int] = {e.name: 0 for e in self.engines}

    def _running(self, engine: DockerEngine) -> int:
        """Containers running on the engine by its own count (cached :data:`LOAD_TTL_S`)."""
        now = time.monotonic()
        seen = self._reported.get(engine.name)
        if seen is not None and now - seen[0] < LOAD_TTL_S:
            return seen[1]
        try:
            with engine.calls():
                count = int(engine.client.info().get("ContainersRunning") or 0)
        except Exception:
            count = 0
        self._reported[engine.name] = (now, count)
        return count

    def load(self, engine: DockerEngine) -> float:
        """``running / capacity`` of ``engine`` (module docstring)."""
        running = engine.live_boxes()
        if len(self.engines) > 1:
            running = max(running, self._running(engine))
        return running / max(1, engine.capacity)

    def order(self) -> list[DockerEngine]:
        """The engines in the order a new box tries them: answering ones by load, then the ones
        marked gone (asked again last)."""
        if len(self.engines) == 1:
            return list(self.engines)
        up = [e for e in self.engines if not e.gone]
        down = [e for e in self.engines if e.gone]
        index = {e.name: i for i, e in enumerate(self.engines)}
        up.sort(key=lambda e: (self.load(e), index[e.name]))
        return up + down

    def create(self, spec: BoxSpec) -> DockerBox:
        """A box on the least loaded engine that can make it (its image sent there first when
        missing or stale); :class:`~.provider.EngineGone` when none answers, ``RuntimeError``
        naming each engine's problem when none can make it."""
        problems: list[str] = []
        gone: EngineGone | None = None
        for engine in self.order():
            try:
                engine.ensure_image(spec.image)
                box = engine.create(spec)
            except EngineGone as exc:
                gone = exc
                problems.append(f"{engine.name}: gone")
                continue
            except RuntimeError as exc:
                if len(self.engines) == 1:
                    raise
                problems.append(f"{engine.name}: {exc}")
                continue
            with self._lock:
                self.placed[engine.name] += 1
            return box
        if gone is not None and len(problems) == 1:
            raise gone
        raise RuntimeError(f"no engine could create a container: {'; '.join(problems)}")

    def ensure_image(self, image: str) -> None:
        """``image`` current on every engine that answers; when on none, the one engine's own
        error (:class:`~.image_transfer.ImageMissing` for a missing image), or a
        ``RuntimeError`` naming each engine's."""
        problems: list[RuntimeError | EngineGone] = []
        for engine in self.engines:
            try:
                engine.ensure_image(image)
            except (RuntimeError, EngineGone) as exc:
                problems.append(exc)
        if len(problems) == 1 == len(self.engines):
            raise problems[0]
        if len(problems) == len(self.engines):
            raise RuntimeError("; ".join(str(p) for p in problems))

    def live_boxes(self) -> int:
        return sum(e.live_boxes() for e in self.engines)

    def close(self) -> None:
        """Nothing: the engines are the process's (:meth:`DockerEngine.shared`), closed at
        exit; their boxes are closed by the pools and envs that made them."""
