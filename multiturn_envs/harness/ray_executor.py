"""The Ray executor: a run's pending episodes sharded over Ray actors (one machine or a cluster).

``run_eval(..., executor=RayExecutor(...))`` (or ``"ray"``) runs the episodes of a run on Ray
actors; docs/scale-out.md shows how. Ray is an optional extra (``pip install
'multiturn-envs[ray]'``), imported only when a Ray run starts. The executor protocol and the
local executor live in :mod:`~multiturn_envs.harness.executors`.

Design (what a study at scale needs, and why it is built this way):

* **Each worker is a full local runner.** A worker actor calls the very same local runner
  (:func:`~multiturn_envs.harness.runner.run_local`) on its shard, so it owns its env pool,
  its wrapper stacks and, for sandboxed envs, its own sandbox pool on its own machine: no
  env, container or database crosses a machine boundary. Records
  are therefore the local executor's records, key for key: seeds depend only on (run seed,
  task id, sample, budget), never on which worker ran an episode or in what order.
* **Shards.** The pending episodes, task-major, are cut into ``num_workers * shards_per_worker``
  contiguous shards, so a task's samples stay on one worker (env instances build per-task
  tables once) and a worker runs one shard at a time with its whole ``in_flight`` batch. With
  ``shards_per_worker > 1`` a fast worker takes the next shard when it is done (load balance
  on mixed machines), at the price of rebuilding its env pool per shard.
* **Records stream to the driver's JSONL.** A worker's shard runs as a Ray streaming generator:
  every finished trajectory is yielded as soon as its episode ends, and the driver writes it
  with the same :class:`~multiturn_envs.harness.records.RecordWriter` as a local run. One file
  written by one process keeps the local guarantees unchanged: one ``write(2)`` per record,
  torn-tail repair and key-based resume after a driver crash, no shared filesystem needed on
  the cluster and no merge step that a crash could interrupt. (Per-worker files merged at the
  end would save the driver a few KB/s of traffic but add a second place where records can be
  lost or doubled.)
* **A lost worker costs only its unfinished trajectories.** When an actor dies (process killed,
  node lost), the driver has every record it streamed before; the rest of its shard (the
  episodes in flight and those not started) goes to a fresh actor, up to ``max_retries`` times
  per shard. Rerun episodes get the same seeds, so the file ends up exactly as without the
  loss. An exception raised by an env or a policy is a bug, not a loss: it stops the run with
  the worker's traceback, as locally.
* **Policy placement.** ``"worker"``: each worker builds the policy (``policy_factory()``, or a
  pickled copy of the policy object) and calls it in process: baselines, small models, HTTP
  clients. ``"actor-pool"``: ``policy_actors`` Ray actors (e.g. one per GPU, see
  ``policy_actor_options``) hold the policy; each worker sends its per-tick batch to one of
  them. Requests then carry the conversation, seed and episode id but no env (it lives in the
  worker) but the env's system prompt and tools, so an LLM policy is prompted exactly as in
  the worker; oracle baselines need ``"worker"``.
* **Resume after a driver crash** is the local resume: the driver reads the keys already in
  ``out``, shards only the rest; the actors of a dead driver die with its Ray job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from multiturn_envs.harness.config import RunOptions, RunSummary
from multiturn_envs.harness.progress import ProgressLine
from multiturn_envs.harness.records import (
    MemoryWriter,
    RecordWriter,
    RunHeader,
    TrajectoryRecord,
    record_key,
)
from multiturn_envs.harness.run_config import EvalConfig, RecordKey
from multiturn_envs.harness.runner import EnvFactory, run_local
from multiturn_envs.policies.base import AsyncPolicy, Policy, PolicyCaller, Reply, TurnRequest

__all__ = ["PLACEMENTS", "ClusterRunSummary", "RayExecutor"]

PLACEMENTS: tuple[str, ...] = ("worker", "actor-pool")


@dataclasses.dataclass
class ClusterRunSummary(RunSummary):
    """A :class:`RunSummary` plus what the cluster did.

    Attributes:
        workers: worker actors started, replacements included.
        lost_workers: actors that died mid-shard (their unfinished episodes were rerun).
        rerun_episodes: episodes handed to a replacement actor.
        per_worker: records streamed by each actor, keyed ``host:pid``.
        duplicates: records received for a key already written (dropped; should stay 0).
        sandbox_runs: with ``sandbox_placement="node"``, the code runs each node's sandbox
            actor served, keyed by node id (:mod:`~multiturn_envs.harness.ray_sandboxes`).
    """

    workers: int = 0
    lost_workers: int = 0
    rerun_episodes: int = 0
    per_worker: dict[str, int] = dataclasses.field(default_factory=dict)
    duplicates: int = 0
    sandbox_runs: dict[str, int] = dataclasses.field(default_factory=dict)


def shard_keys(config: EvalConfig, done: set[RecordKey], n_shards: int) -> list[list[RecordKey]]:
    """The pending episodes, task-major, cut into at most ``n_shards`` contiguous shards.

    Task-major keeps a task's samples together (task affinity across the cluster); contiguous
    near-equal cuts keep the shards balanced to within one episode.
    """
    budgets = config.budgets()
    pending = [
        (task, sample, budget)
        for task in config.tasks
        for budget in budgets
        for sample in range(config.samples)
        if (task, sample, budget) not in done
    ]
    n = max(1, min(n_shards, len(pending)))
    bounds = [round(i * len(pending) / n) for i in range(n + 1)]
    return [pending[bounds[i] : bounds[i + 1]] for i in range(n) if bounds[i] < bounds[i + 1]]


# ------------------------------------------------------------------------------ worker side
class _QueueSink(RecordWriter):
    """A :class:`RecordWriter` that hands each record to a queue instead of a file."""

    def __init__(
        self, header: RunHeader, done: set[RecordKey], out: queue.SimpleQueue[Any]
    ) -> None:
        super().__init__(path="<driver>", header=header)
        self.done = set(done)
        self._out = out

    def open(self) -> _QueueSink:
        return self

    def write(self, record: TrajectoryRecord) -> None:
        self._out.put(("record", record))
        self.done.add(record_key(record))

    def close(self) -> None:
        return None


class _PooledPolicy:
    """The worker's view of a policy served by a Ray actor: one remote call per tick."""

    def __init__(self, name: str, server: Any) -> None:
        self.name = name
        self._server = server

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        import ray

        payload = [
            (list(r.messages), r.seed, r.episode_id, r.system_prompt, r.tools, r.tool_system_prompt)
            for r in requests
        ]
        return list(ray.get(self._server.act.remote(payload)))


class PolicyServer:
    """A Ray actor holding one policy (e.g. a GPU engine) for :class:`RayExecutor`'s pool.

    Requests arrive without their env (it lives in the rollout worker): a policy that reads
    ``request.live_env()`` gets a :class:`~multiturn_envs.errors.PolicyError` saying so.
    """

    def __init__(self, make_policy: Callable[[], Policy | AsyncPolicy]) -> None:
        self.policy = make_policy()
        self._caller = PolicyCaller(self.policy)
        self._lock = threading.Lock()  # one caller (one event loop), even with max_concurrency

    def act(self, payload: list[tuple[Any, ...]]) -> list[Reply]:
        """One batch; each request arrives as (messages, seed, episode id, the env's system
        prompt, its tools, its tool-mode prompt): everything a policy reads but the env."""
        requests = [
            TurnRequest(
                messages=m,
                env=None,
                seed=s,
                episode_id=e,
                system_prompt=p,
                tools=t,
                tool_system_prompt=tp,
            )
            for m, s, e, p, t, tp in payload
        ]
        with self._lock:
            return self._caller(requests)


class RolloutWorker:
    """A Ray actor that runs shards of a run with the local runner and streams the records."""

    def __init__(
        self,
        config: EvalConfig,
        header: RunHeader,
        make_policy: Callable[[], Policy | AsyncPolicy] | None,
        policy_name: str,
        server: Any,
        in_flight: int,
        threads: int,
        make_env: EnvFactory | None,
    ) -> None:
        import multiturn_envs  # noqa: F401  (registers the MT/* ids in this process)

        self.config, self.header = config, header
        self.in_flight, self.threads, self.make_env = in_flight, threads, make_env
        if server is not None:
            self.policy: Policy | AsyncPolicy = _PooledPolicy(policy_name, server)
        else:
            assert make_policy is not None
            self.policy = make_policy()
            if self.policy.name != policy_name:
                raise ValueError(
                    f"the worker's policy is named {self.policy.name!r}, the driver's "
                    f"{policy_name!r}: records would disagree"
                )

    def where(self) -> str:
        """``host:pid`` of this actor (progress lines, tests that kill it)."""
        return f"{socket.gethostname()}:{os.getpid()}"

    def run(self, keys: list[RecordKey]) -> Iterator[tuple[str, Any]]:
        """Run ``keys``; yield ``("records", (where, [...]))`` as episodes end, then
        ``("summary", {...})``."""
        keys = [(str(t), int(s), int(b)) for t, s, b in keys]
        shard = dataclasses.replace(self.config, tasks=list(dict.fromkeys(k[0] for k in keys)))
        wanted = set(keys)
        done = {k for k in shard.episode_keys() if k not in wanted}
        items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        sink = _QueueSink(self.header, done, items)

        def target() -> None:
            try:
                options = RunOptions(
                    in_flight=self.in_flight,
                    workers=self.threads,
                    progress=False,
                    make_env=self.make_env,
                )
                s = run_local(shard, self.policy, sink, options)
                items.put(("summary", {"policy_calls": s.policy_calls, "steps": s.steps}))
            except BaseException as exc:  # handed to the generator, which re-raises it
                items.put(("error", exc))

        thread = threading.Thread(target=target, name="rollout", daemon=True)
        thread.start()
        held: tuple[str, Any] | None = None
        while True:
            kind, payload = held if held is not None else items.get()
            held = None
            if kind == "record":
                batch = [payload]
                while held is None:
                    try:
                        item = items.get_nowait()
                    except queue.Empty:
                        break
                    if item[0] == "record":
                        batch.append(item[1])
                    else:
                        held = item
                yield ("records", (self.where(), batch))
            elif kind == "summary":
                thread.join()
                yield ("summary", payload)
                return
            else:
                thread.join()
                raise payload


# ------------------------------------------------------------------------------ driver side
@dataclasses.dataclass
class _Job:
    shard: int
    keys: list[RecordKey]
    actor: Any
    where: str


@dataclasses.dataclass
class RayExecutor:
    """Shard a run over Ray actors; records stream back to the driver's JSONL.

    Args:
        address: the cluster (``"auto"``, ``"host:6379"``); ``None``: ``RAY_ADDRESS`` if set,
            else a local Ray started for this run and stopped after it. Ignored when Ray is
            already initialised in this process.
        num_workers: rollout actors (default: the cluster's CPUs // ``worker_cpus``).
        policy_placement: ``"worker"`` or ``"actor-pool"`` (module docstring).
        policy_factory: builds the policy in each worker / policy actor (e.g.
            ``functools.partial(load_policy, "pkg.mod:attr")``); default: a pickled copy of the
            policy handed to ``run_eval``.
        policy_actors: size of the actor pool (``"actor-pool"`` only).
        policy_actor_options: Ray ``.options`` of a policy actor, e.g. ``{"num_gpus": 1}``.
        worker_cpus: CPUs a rollout actor reserves (Ray schedules by it).
        worker_options: further Ray ``.options`` of a rollout actor (``resources``,
            ``runtime_env``, ``scheduling_strategy``; default strategy ``"SPREAD"``, so the
            sandboxes of different workers land on different machines).
        shards_per_worker: shards per worker (1: one static shard each; more: load balance).
        max_retries: replacement actors per shard before the run fails.
        init_kwargs: extra ``ray.init`` arguments (``runtime_env``, ``namespace``...).
        sandbox_placement: ``"spread"`` (each worker's sandboxes on the engines it is given,
            placed by load) or ``"node"``: one sandbox actor per node owns that node's engines
            and code pool, and each worker is pinned to a node and uses that node's engines
            (:mod:`~multiturn_envs.harness.ray_sandboxes`).
        sandbox_engines: with ``"node"``, a node's engines by node id or IP (default: the
            node's own engine); read when the executor is made, and refused with another
            placement (it would be ignored).
    """

    address: str | None = None
    num_workers: int | None = None
    policy_placement: str = "worker"
    policy_factory: Callable[[], Policy | AsyncPolicy] | None = None
    policy_actors: int = 1
    policy_actor_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    worker_cpus: float = 1.0
    worker_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    shards_per_worker: int = 1
    max_retries: int = 3
    init_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    sandbox_placement: str = "spread"
    sandbox_engines: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        from multiturn_envs.harness.ray_sandboxes import SANDBOX_PLACEMENTS, check_engine_table

        if self.sandbox_placement not in SANDBOX_PLACEMENTS:
            raise ValueError(
                f"sandbox_placement must be one of {SANDBOX_PLACEMENTS}, got "
                f"{self.sandbox_placement!r}"
            )
        self.sandbox_engines = check_engine_table(self.sandbox_engines)  # before Ray starts
        if self.sandbox_engines and self.sandbox_placement != "node":
            raise ValueError(
                "sandbox_engines is read only with sandbox_placement='node' (one sandbox actor "
                f"per node owns its engines), not {self.sandbox_placement!r}"
            )
        if self.policy_placement not in PLACEMENTS:
            raise ValueError(
                f"policy_placement must be one of {PLACEMENTS}, got {self.policy_placement!r}"
            )
        if self.num_workers is not None and self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")
        if self.policy_actors < 1 or self.shards_per_worker < 1 or self.max_retries < 0:
            raise ValueError("policy_actors and shards_per_worker must be >= 1, max_retries >= 0")

    def run(
        self, config: EvalConfig, policy: Policy | AsyncPolicy, out: str | None, options: RunOptions
    ) -> ClusterRunSummary:
        """Like ``run_eval``, with ``in_flight`` and ``workers`` per rollout actor."""
        t_start = time.perf_counter()
        writer = options.writer(out, config)
        writer.open()  # a file of another run fails here, before any cluster work
        try:
            return self._run(
                config,
                policy,
                writer,
                options.in_flight,
                options.workers,
                options.progress,
                options.make_env,
                t_start,
            )
        finally:
            writer.close()

    def _run(
        self,
        config: EvalConfig,
        policy: Policy | AsyncPolicy,
        writer: RecordWriter,
        in_flight: int,
        threads: int,
        progress: bool | None,
        make_env: EnvFactory | None,
        t_start: float,
    ) -> ClusterRunSummary:
        try:
            import ray
            from ray.exceptions import (
                ActorDiedError,
                ActorUnavailableError,
                ObjectLostError,
                OwnerDiedError,
                RayActorError,
                WorkerCrashedError,
            )
        except ImportError:
            raise ImportError(
                "the Ray executor needs Ray: pip install 'multiturn-envs[ray]'"
            ) from None
        lost_errors = (
            ActorDiedError,
            ActorUnavailableError,
            RayActorError,
            WorkerCrashedError,
            ObjectLostError,
            OwnerDiedError,
        )
        total = config.total()
        skipped = len(writer.done)
        summary = ClusterRunSummary(
            path=str(writer.path),
            run_id=str(writer.header["run_id"]),
            total=total,
            skipped=skipped,
            written=0,
            policy_calls=0,
            steps=0,
            wall_s=0.0,
            repaired_bytes=writer.repaired_bytes,
            records=writer.records if isinstance(writer, MemoryWriter) else None,
        )
        if skipped >= total:
            summary.wall_s = time.perf_counter() - t_start
            return summary
        started_ray = False
        if not ray.is_initialized():
            ray.init(address=self.address, **self.init_kwargs)
            started_ray = True
        show = sys.stderr.isatty() if progress is None else progress
        bar = ProgressLine(total, skipped, show)
        servers: list[Any] = []
        jobs: dict[Any, _Job] = {}
        idle: list[Any] = []
        nodes: list[tuple[str, list[str] | None, Any]] = []
        try:
            n_workers = self.num_workers or default_workers(
                float(ray.cluster_resources().get("CPU", 1)), self.worker_cpus
            )
            shards = shard_keys(config, set(writer.done), n_workers * self.shards_per_worker)
            n_workers = min(n_workers, len(shards))
            make_policy = self.policy_factory or _Pickled(policy)
            if self.policy_placement == "actor-pool":
                server_cls = ray.remote(PolicyServer)
                opts = {"max_restarts": 2, "max_task_retries": 2, **self.policy_actor_options}
                servers = [
                    server_cls.options(**opts).remote(make_policy)
                    for _ in range(self.policy_actors)
                ]
            if self.sandbox_placement == "node":
                from multiturn_envs.harness.ray_sandboxes import place_node_sandboxes

                nodes = place_node_sandboxes(self.sandbox_engines)
                ray.get([actor.node_id.remote() for _, _, actor in nodes])  # up and pinned
            worker_cls = ray.remote(RolloutWorker)
            worker_opts = {
                "num_cpus": self.worker_cpus,
                "scheduling_strategy": "SPREAD",
                "max_restarts": 0,
                **self.worker_options,
            }
            policy_ref = ray.put(make_policy)

            def new_actor() -> Any:
                index = summary.workers
                summary.workers += 1
                server = servers[index % len(servers)] if servers else None
                return worker_cls.options(**_on_node(worker_opts, nodes, index)).remote(
                    config,
                    writer.header,
                    None if server is not None else policy_ref,
                    policy.name,
                    server,
                    in_flight,
                    threads,
                    make_env,
                )

            todo: list[tuple[int, list[RecordKey]]] = list(enumerate(shards))
            retries = [0] * len(shards)
            idle = [new_actor() for _ in range(n_workers)]

            def dispatch() -> None:
                while todo and idle:
                    shard, keys = todo.pop(0)
                    actor = idle.pop(0)
                    gen = actor.run.options(num_returns="streaming").remote(keys)
                    jobs[gen] = _Job(shard, keys, actor, where="")

            dispatch()
            while jobs:
                ready, _ = ray.wait(list(jobs), num_returns=1)
                gen = ready[0]
                job = jobs[gen]
                try:
                    kind, payload = ray.get(next(gen))
                except StopIteration:
                    kind, payload = "summary", {}
                except lost_errors as exc:
                    del jobs[gen]
                    left = [k for k in job.keys if k not in writer.done]
                    summary.lost_workers += 1
                    if left:
                        retries[job.shard] += 1
                        if retries[job.shard] > self.max_retries:
                            raise RuntimeError(
                                f"shard {job.shard} lost its worker {retries[job.shard]} times "
                                f"(last: {type(exc).__name__}); giving up. The records so far "
                                f"are in {writer.path}: rerun to resume."
                            ) from exc
                        summary.rerun_episodes += len(left)
                        print(
                            f"\nworker {job.where or '?'} lost ({type(exc).__name__}); "
                            f"{len(left)} unfinished episodes go to a new worker",
                            file=sys.stderr,
                        )
                        todo.insert(0, (job.shard, left))
                    _kill(ray, job.actor)
                    if todo:  # a replacement, also when the lost one had only shards to come
                        idle.append(new_actor())
                    dispatch()
                    continue
                if kind == "records":
                    job.where, records = payload
                    fresh = 0
                    for rec in records:
                        if record_key(rec) in writer.done:
                            summary.duplicates += 1
                            continue
                        writer.write(rec)
                        fresh += 1
                    summary.written += fresh
                    summary.per_worker[job.where] = summary.per_worker.get(job.where, 0) + fresh
                    bar.update(fresh)
                else:  # the shard is done; the actor takes the next one or retires
                    del jobs[gen]
                    summary.policy_calls += int(payload.get("policy_calls", 0))
                    summary.steps += int(payload.get("steps", 0))
                    if todo:
                        idle.append(job.actor)
                        dispatch()
                    else:
                        _kill(ray, job.actor)
        finally:
            bar.close()
            for actor in [*(j.actor for j in jobs.values()), *idle, *servers]:
                _kill(ray, actor)
            if nodes:
                with contextlib.suppress(Exception):
                    stats = ray.get([a.stats.remote() for _, _, a in nodes], timeout=60)
                    summary.sandbox_runs = {str(x["node"]): int(x["runs"]) for x in stats}
                with contextlib.suppress(Exception):
                    ray.get([a.close.remote() for _, _, a in nodes], timeout=60)
                for _, _, actor in nodes:
                    _kill(ray, actor)
            if started_ray:
                ray.shutdown()
        if summary.skipped + summary.written != total:
            raise RuntimeError(  # a bug of this module, never a user's mistake
                f"the Ray run ended with {summary.skipped + summary.written} of {total} "
                f"trajectories in {writer.path}; rerun to resume"
            )
        summary.wall_s = time.perf_counter() - t_start
        return summary


class _Pickled:
    """A zero-argument factory that returns (a copy of) one policy object."""

    def __init__(self, policy: Policy | AsyncPolicy) -> None:
        self.policy = policy

    def __call__(self) -> Policy | AsyncPolicy:
        return self.policy


def _on_node(
    options: dict[str, Any], nodes: Sequence[tuple[str, list[str] | None, Any]], index: int
) -> dict[str, Any]:
    """A worker's Ray options: pinned to node ``index`` (in turn) with that node's engines as
    ``$MTE_ENGINES``, when sandboxes are placed per node; else ``options`` as they are."""
    if not nodes:
        return options
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from multiturn_envs.sandbox.engines import ENGINES_VARIABLE

    node_id, engines, _ = nodes[index % len(nodes)]
    pinned = {**options, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, False)}
    if engines:
        runtime_env = dict(pinned.get("runtime_env") or {})
        env_vars = {**runtime_env.get("env_vars", {}), ENGINES_VARIABLE: " ".join(engines)}
        pinned["runtime_env"] = {**runtime_env, "env_vars": env_vars}
    return pinned


def _kill(ray: Any, actor: Any) -> None:
    with contextlib.suppress(Exception):  # already dead: nothing to release
        ray.kill(actor, no_restart=True)


def default_workers(cluster_cpus: float, worker_cpus: float) -> int:
    """Rollout actors that fit on ``cluster_cpus`` at ``worker_cpus`` each (at least one)."""
    if worker_cpus <= 0:
        return max(1, math.floor(cluster_cpus))
    return max(1, math.floor(cluster_cpus / worker_cpus))
