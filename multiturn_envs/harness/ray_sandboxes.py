"""Sandboxes placed by Ray: one actor per node owns that node's engines and code pool.

With ``RayExecutor(sandbox_placement="node")`` a run on a Ray cluster starts one
:class:`NodeSandboxes` actor on every alive node (pinned there: ``NodeAffinitySchedulingStrategy``
with ``soft=False``, no CPU reserved), named after its node. It owns that node's Docker engines
(``sandbox_engines[node]``: a node id or IP mapped to engine addresses; default the node's own
engine, ``local``) and one code pool over them. Rollout workers are pinned to the nodes in turn
and get ``$MTE_ENGINES`` set to their node's engines, so **an episode runs where its sandbox is**:

* DeepCoder-MT with ``backend="multiturn_envs.harness.ray_sandboxes:node_sandbox"`` sends each
  submission to the actor of the worker's own node (:class:`NodeSandbox`): one pool per node,
  however many workers run there, and no submission crosses to another machine;
* MT/Terminal-v0 (whose shell is a long-lived stream that cannot travel through an actor call)
  makes its containers from the worker itself, on the same engines, through ``$MTE_ENGINES``.

Why per node rather than per worker: a pool's containers are the node's to size (its CPUs, its
engines' capacity), and a node's workers then share warm containers instead of each keeping
their own. The executor reads each actor's count of runs before it stops them
(``ClusterRunSummary.sandbox_runs``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from multiturn_envs.sandbox.base import RunLimits, RunResult, Sandbox, TestCase

__all__ = [
    "ACTOR_PREFIX",
    "SANDBOX_PLACEMENTS",
    "NodeSandbox",
    "NodeSandboxes",
    "node_sandbox",
    "place_node_sandboxes",
]

ACTOR_PREFIX = "mte-sandboxes-"
"""A node's actor is named ``ACTOR_PREFIX + node id`` (in the run's Ray namespace)."""
SANDBOX_PLACEMENTS: tuple[str, ...] = ("spread", "node")
MAX_CONCURRENT_RUNS = 256
"""Submissions a node's actor takes at once: its pool runs ``size`` of them and queues the
rest first come first served (a plain actor would take one at a time: one container busy)."""


class NodeSandboxes:
    """A Ray actor pinned to one node, owning its engines and code pool (module docstring)."""

    def __init__(self, engines: Sequence[str] | None, pool_size: int | None) -> None:
        self.engines = tuple(engines) if engines else None
        self.pool_size = pool_size
        self._pool: Any = None
        self._lock = threading.Lock()  # the actor serves MAX_CONCURRENT_RUNS threads
        self.runs = 0

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def run(self, program: str, tests: list[TestCase], limits: RunLimits | None) -> RunResult:
        """One submission on this node's pool (started at the first)."""
        with self._lock:
            if self._pool is None:
                from multiturn_envs.sandbox.docker_pool import DockerSandbox

                self._pool = DockerSandbox(size=self.pool_size, engines=self.engines)
            self.runs += 1
            pool = self._pool
        result: RunResult = pool.run(program, tests, limits)
        return result

    def stats(self) -> dict[str, Any]:
        return {"node": self.node_id(), "runs": self.runs}

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


class NodeSandbox(Sandbox):
    """DeepCoder-MT's sandbox inside a rollout worker: every run goes to the
    :class:`NodeSandboxes` actor of the worker's own node."""

    name = "ray-node"

    def __init__(self) -> None:
        import ray

        node = ray.get_runtime_context().get_node_id()
        try:
            self._actor = ray.get_actor(ACTOR_PREFIX + node)
        except ValueError:
            raise RuntimeError(
                f"no sandbox actor on this node ({node}): the node_sandbox backend needs "
                "RayExecutor(sandbox_placement='node')"
            ) from None

    def run(
        self, program: str, tests: Sequence[TestCase], limits: RunLimits | None = None
    ) -> RunResult:
        import ray

        result: RunResult = ray.get(self._actor.run.remote(program, list(tests), limits))
        return result

    def close(self) -> None:
        """Nothing: the pool is the node's, stopped by the executor."""


def node_sandbox() -> Sandbox:
    """The DeepCoder backend ``"multiturn_envs.harness.ray_sandboxes:node_sandbox"``."""
    return NodeSandbox()


def _engines_of(node: Mapping[str, Any], table: Mapping[str, Sequence[str]]) -> list[str] | None:
    for key in (node["NodeID"], node.get("NodeManagerAddress", "")):
        if key in table:
            return list(table[key])
    return None


def check_engine_table(engines: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    """``sandbox_engines`` read: node id or IP -> engine addresses, each list parsed
    (``ValueError`` naming the node's entry), before Ray starts or any actor does."""
    from multiturn_envs.sandbox.engines import parse_engines

    if engines is None:
        return {}
    if not isinstance(engines, Mapping):
        raise ValueError(
            "sandbox_engines maps a node id or IP to engine addresses, not "
            f"{type(engines).__name__}"
        )
    table: dict[str, list[str]] = {}
    for key, addresses in engines.items():
        if not isinstance(key, str) or isinstance(addresses, str | bytes):
            raise ValueError(
                f"sandbox_engines[{key!r}]: a node id or IP mapped to a list of addresses"
            )
        try:
            parse_engines(list(addresses))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"sandbox_engines[{key!r}]: {exc}") from None
        table[key] = list(addresses)
    return table


def place_node_sandboxes(
    engines: Mapping[str, Sequence[str]] | None = None, pool_size: int | None = None
) -> list[tuple[str, list[str] | None, Any]]:
    """Start one :class:`NodeSandboxes` on every alive node with CPUs; returns ``(node id, its
    engines, actor)`` for each, in the order Ray lists the nodes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    table = check_engine_table(engines)
    actor_cls = ray.remote(NodeSandboxes)
    placed = []
    for node in ray.nodes():
        if not node.get("Alive") or not node.get("Resources", {}).get("CPU"):
            continue
        node_id = str(node["NodeID"])
        node_engines = _engines_of(node, table)
        actor = actor_cls.options(
            name=ACTOR_PREFIX + node_id,
            num_cpus=0,
            max_concurrency=MAX_CONCURRENT_RUNS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(node_engines, pool_size)
        placed.append((node_id, node_engines, actor))
    if not placed:
        raise RuntimeError("no alive Ray node with CPUs to place the sandboxes on")
    return placed
