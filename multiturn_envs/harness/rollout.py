"""The runner: N tasks x K samples under a turn budget, many episodes in flight, records streamed.

Design:

* **One batched policy call per tick.** A fixed pool of ``in_flight`` env instances (each made
  with ``gym.make(env_id, **env_kwargs)`` and wrapped in ``TurnBudget`` and, optionally,
  ``ErrorInjection``) holds the live episodes. Each tick collects one :class:`TurnRequest` per
  live episode, makes ONE ``act`` (or ``aact``) call for all of them, and steps every env with
  its reply. A finished episode writes its record and its slot takes the next pending episode,
  so the batch stays full; the batch mixes episodes at different turns, which a batched
  backend does not care about.
* **Async policies** (HTTP backends) run their ``aact`` on one event loop owned by the run;
  the tick barrier stays, because the protocol wants the whole batch in one call.
* **Slow envs** (Docker sandboxes, databases) are stepped and reset concurrently by a thread
  pool of ``workers`` threads; with ``workers=1`` (the default, right for pure-Python envs such
  as FrozenLake) they are stepped inline, since a thread hop costs more than such a step.
* **Hidden vs announced budget.** Hidden (default): one run at ``max_turns`` gives the whole
  Pass@(K,T) surface, because the first T turns of a T_max rollout are distributed like a
  budget-T rollout. Announced: the policy is told its budget, so every T of ``turn_grid`` gets
  its own episodes (the key carries T).
* **Seeds.** Episode ``(task, sample, T)`` gets a ``SeedSequence(entropy=run seed,
  spawn_key=(hash(task_id), sample, T if announced else 0))``; its first word seeds
  ``env.reset``, the next ``max_turns`` words are the per-turn policy seeds. Seeds therefore
  depend on the task id, never on the task's position, the schedule or ``in_flight``; samples
  never share a seed; a resumed run reproduces the records of an uninterrupted one.
* **Memory.** Only the episodes in flight are held; each record is written when its episode
  ends. The schedule keeps one lazy generator and one counter per task (task affinity, see
  :class:`_Schedule`), never the list of all episodes.
* **Clean-up.** Envs, threads and the event loop are closed on every exit path, including an
  exception from the policy and ``KeyboardInterrupt``.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np

from multiturn_envs.core import BUDGET_MODES, TextEnv
from multiturn_envs.harness.records import (
    SCHEMA_VERSION,
    RecordKey,
    RecordWriter,
    make_header,
)
from multiturn_envs.policies.base import AsyncPolicy, Policy, Reply, TurnRequest
from multiturn_envs.policies.prompting import reply_tokens
from multiturn_envs.wrappers import ErrorInjection, TurnBudget, text_env_of

if TYPE_CHECKING:
    from multiturn_envs.harness.executors import Executor


@dataclass
class EvalConfig:
    """Everything that determines the records of a run (it is the run header's ``config``).

    Attributes:
        env_id: a registered Gymnasium id, e.g. ``"MT/FrozenLake-v0"``.
        policy: the policy's name or spec (what the records call it).
        tasks: the task ids to run (``env.task_ids()`` gives the choices).
        samples: K, trajectories per task (and per T in announced mode).
        max_turns: T_max, the turn budget.
        budget_mode: ``"hidden"`` or ``"announced"``.
        turn_grid: announced mode only: the budgets to run (default ``1..max_turns``).
        error_after: ``None``, or ``k`` for ``ErrorInjection(after_expert_steps=k)``.
        seed: the run seed (a non-negative int).
        env_kwargs: extra ``gym.make`` keyword arguments (JSON-able).
    """

    env_id: str
    policy: str
    tasks: list[str]
    samples: int
    max_turns: int
    budget_mode: str = "hidden"
    turn_grid: list[int] | None = None
    error_after: int | None = None
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.budget_mode not in BUDGET_MODES:
            raise ValueError(f"budget_mode must be one of {BUDGET_MODES}, got {self.budget_mode!r}")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {self.max_turns!r}")
        if not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"samples must be a positive int, got {self.samples!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if self.error_after is not None and self.error_after < 0:
            raise ValueError(f"error_after must be >= 0, got {self.error_after!r}")
        if not self.tasks:
            raise ValueError("a run needs at least one task")
        self.tasks = [str(t) for t in self.tasks]
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError("task ids must be distinct")
        if self.budget_mode == "hidden":
            if self.turn_grid is not None:
                raise ValueError("turn_grid is for announced budgets; hidden mode runs max_turns")
        else:
            grid = self.turn_grid or list(range(1, self.max_turns + 1))
            grid = sorted({int(t) for t in grid})
            if grid[0] < 1 or grid[-1] > self.max_turns:
                raise ValueError(f"turn_grid must lie in 1..{self.max_turns}, got {grid}")
            self.turn_grid = grid

    def budgets(self) -> list[int]:
        """The budgets episodes run under: ``[max_turns]`` (hidden) or the turn grid."""
        return [self.max_turns] if self.budget_mode == "hidden" else list(self.turn_grid or [])

    def total(self) -> int:
        return len(self.budgets()) * len(self.tasks) * self.samples

    def episode_keys(self) -> Iterator[RecordKey]:
        """Every episode of the run, budget-major, then task, then sample."""
        for budget in self.budgets():
            for task in self.tasks:
                for sample in range(self.samples):
                    yield (task, sample, budget)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, **asdict(self)}


def task_hash(task_id: str) -> int:
    """A stable 63-bit hash of a task id (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(task_id.encode("utf-8")).digest()[:8], "big") >> 1


def episode_seeds(
    run_seed: int, task_id: str, sample: int, budget_key: int, n_turns: int
) -> tuple[int, list[int]]:
    """The env seed and the ``n_turns`` per-turn policy seeds of one episode."""
    seq = np.random.SeedSequence(
        entropy=run_seed, spawn_key=(task_hash(task_id), sample, budget_key)
    )
    words = seq.generate_state(1 + n_turns, dtype=np.uint64).tolist()
    return int(words[0]), [int(w) for w in words[1:]]


class _Schedule:
    """Hands out the pending episodes with task affinity.

    A freed slot takes the next pending episode of the task it just ran; when that task is
    exhausted, a task nobody has started; when none is left, a share of the task with the most
    episodes left. So each env instance sees few distinct tasks: envs that build per-task
    structures (FrozenLake's dynamics and oracle tables) build them once per instance and
    task, not once per episode, and their caches stay small. Records do not depend on the
    schedule (seeds are per key), only the order of the lines in the file does.
    """

    def __init__(self, config: EvalConfig, done: set[RecordKey]) -> None:
        budgets = config.budgets()
        self._left: dict[str, int] = {}
        self._iters: dict[str, Iterator[RecordKey]] = {}
        for task in config.tasks:
            left = sum(
                1 for b in budgets for s in range(config.samples) if (task, s, b) not in done
            )
            if left:
                self._left[task] = left
                self._iters[task] = self._keys_of(task, budgets, config.samples, done)
        self._fresh = deque(self._left)
        self.pending = sum(self._left.values())

    @staticmethod
    def _keys_of(
        task: str, budgets: list[int], samples: int, done: set[RecordKey]
    ) -> Iterator[RecordKey]:
        for b in budgets:
            for s in range(samples):
                if (task, s, b) not in done:
                    yield (task, s, b)

    def take(self, prefer: str | None) -> RecordKey | None:
        task = prefer if prefer in self._left else None
        while task is None and self._fresh:
            candidate = self._fresh.popleft()
            if candidate in self._left:
                task = candidate
        if task is None:
            if not self._left:
                return None
            task = max(self._left, key=self._left.__getitem__)
        self._left[task] -= 1
        if self._left[task] == 0:
            del self._left[task]
        self.pending -= 1
        return next(self._iters[task])


@dataclass
class RunSummary:
    """What a call to :func:`run_eval` did."""

    path: str
    run_id: str
    total: int
    skipped: int
    written: int
    policy_calls: int
    steps: int
    wall_s: float
    repaired_bytes: int = 0


@dataclass(slots=True)
class _Episode:
    key: RecordKey
    env: gym.Env[str, str]
    base: TextEnv
    seed: int
    policy_seeds: list[int]
    spec_json: str | None
    started: float
    reset_s: float
    injection: dict[str, Any] | None
    episode_id: str = ""
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    step_scores: list[float | None] = field(default_factory=list)
    parse_errors: list[bool] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    tokens: list[dict[str, Any] | None] = field(default_factory=list)
    env_s: list[float] = field(default_factory=list)
    policy_s: list[float] = field(default_factory=list)
    first_success: int | None = None
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    truncation_reason: str | None = None
    success: bool = False


class _Slot:
    """One env instance of the pool, with its wrapper stack cached per budget.

    ``specs`` (budget -> the stack's ``env_spec`` JSON) is shared by every slot of a run: all
    instances come from one factory and are interchangeable (which one runs an episode is
    schedule, not record), and Gymnasium builds a wrapper's ``spec`` by deep-copying the
    wrapper's constructor arguments, env included, so computing it per slot cost more than
    a thousand FrozenLake steps per run.
    """

    def __init__(
        self, raw: gym.Env[str, str], config: EvalConfig, specs: dict[int, str | None]
    ) -> None:
        self.raw = raw
        self.base = text_env_of(raw)
        self.config = config
        self._specs = specs
        self._stacks: dict[int, tuple[gym.Env[str, str], str | None]] = {}
        self.episode: _Episode | None = None
        self.last_task: str | None = None

    def stack(self, budget: int) -> tuple[gym.Env[str, str], str | None]:
        if budget not in self._stacks:
            env: gym.Env[str, str] = TurnBudget(self.raw, budget, self.config.budget_mode)
            if self.config.error_after is not None:
                env = ErrorInjection(env, after_expert_steps=self.config.error_after)
            if budget not in self._specs:
                self._specs[budget] = _spec_json(env)
            self._stacks[budget] = (env, self._specs[budget])
        return self._stacks[budget]

    def close(self) -> None:
        self.raw.close()


def _package_version() -> str:
    from multiturn_envs import __version__

    return __version__


def _spec_json(env: gym.Env[Any, Any]) -> str | None:
    try:
        spec = env.spec
        if spec is None:
            return None
        # Only one instance per run (per worker) runs Gymnasium's checker; which instance ran
        # an episode is schedule, not record: say what plain ``gym.make`` would build.
        return replace(spec, disable_env_checker=False).to_json()
    except Exception:  # non-JSON-able kwargs or wrapper args: the record says null
        return None


class _Progress:
    """tqdm when installed, else one rewritten stderr line; silent when off."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.enabled = enabled
        self.total, self.n = total, initial
        self._bar: Any = None
        self._last = 0.0
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, initial=initial, unit="traj", file=sys.stderr)

    def update(self, k: int) -> None:
        self.n += k
        if not self.enabled or k == 0:
            return
        if self._bar is not None:
            self._bar.update(k)
            return
        now = time.monotonic()
        if now - self._last >= 0.2 or self.n >= self.total:
            self._last = now
            sys.stderr.write(f"\r{self.n}/{self.total} trajectories")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


def _call_policy(
    policy: Policy | AsyncPolicy,
    requests: Sequence[TurnRequest],
    loop: asyncio.AbstractEventLoop | None,
) -> list[Reply]:
    if loop is not None:
        replies = loop.run_until_complete(policy.aact(requests))  # type: ignore[union-attr]
    else:
        replies = policy.act(requests)  # type: ignore[union-attr]
    if len(replies) != len(requests):
        raise RuntimeError(
            f"policy {policy.name!r} returned {len(replies)} replies for {len(requests)} requests"
        )
    return list(replies)


class _Turn(NamedTuple):
    """What the runner keeps of one reply: the action and what an LLM backend knew of it."""

    text: str
    logprob: float | None
    tokens: dict[str, Any] | None


def _reply_turn(policy_name: str, reply: Reply | str) -> _Turn:
    if isinstance(reply, str):  # tolerate policies that return bare strings
        return _Turn(reply, None, None)
    text = reply.text
    if not isinstance(text, str):
        raise TypeError(f"policy {policy_name!r} replied {type(text).__name__}, not str")
    logprob = None if reply.logprobs is None else float(sum(reply.logprobs))
    return _Turn(text, logprob, reply_tokens(reply))


def run_eval(
    config: EvalConfig,
    policy: Policy | AsyncPolicy,
    out: str,
    *,
    in_flight: int = 64,
    workers: int = 1,
    resume: bool = True,
    overwrite: bool = False,
    progress: bool | None = None,
    fsync_interval_s: float = 1.0,
    make_env: Callable[[], gym.Env[str, str]] | None = None,
    executor: Executor | str | None = None,
    writer: RecordWriter | None = None,
) -> RunSummary:
    """Run every episode of ``config`` that ``out`` does not hold yet; append their records.

    Args:
        config: what to run (written as the file's header).
        policy: a sync :class:`Policy` or an :class:`AsyncPolicy`.
        out: the JSONL record file (created, or resumed when it exists and ``resume``).
        in_flight: env instances, i.e. the largest batch handed to the policy.
        workers: threads stepping/resetting envs (1: inline).
        resume: skip the trajectories ``out`` already holds; refuse a file of another run.
        overwrite: start ``out`` afresh.
        progress: show a progress bar (default: when stderr is a tty).
        fsync_interval_s: see :class:`RecordWriter`.
        make_env: builds one env instance (default ``gym.make(env_id, **env_kwargs)``).
        executor: ``None``/``"local"`` (this process), ``"ray"`` or an executor object such as
            :class:`~multiturn_envs.harness.executors.RayExecutor` (docs/scale-out.md), which
            shards the episodes over workers; ``in_flight`` and ``workers`` are then per worker.
        writer: where the records go instead of a :class:`RecordWriter` on ``out`` (a Ray
            worker streams its shard to the driver this way); its ``done`` keys are skipped
            and its header's ``run_id`` is stamped on the records.
    """
    if in_flight < 1 or workers < 1:
        raise ValueError("in_flight and workers must be >= 1")
    if not isinstance(policy, Policy | AsyncPolicy):
        raise TypeError(f"{policy!r} is not a Policy or AsyncPolicy (see policies/base.py)")
    if executor is not None and executor != "local":
        from multiturn_envs.harness.executors import resolve_executor

        return resolve_executor(executor).run(
            config,
            policy,
            out,
            in_flight=in_flight,
            workers=workers,
            resume=resume,
            overwrite=overwrite,
            progress=progress,
            fsync_interval_s=fsync_interval_s,
            make_env=make_env,
        )
    is_async = not hasattr(policy, "act")  # a policy with both prefers the sync ``act``

    def default_factory(first: bool) -> gym.Env[str, str]:
        # Gymnasium's passive checker inspects the first reset and step of each instance
        # (~15 ms for a text env); one checked instance per run is enough.
        return gym.make(config.env_id, disable_env_checker=not first, **config.env_kwargs)

    def factory(first: bool) -> gym.Env[str, str]:
        return make_env() if make_env is not None else default_factory(first)

    header = make_header(
        config.to_dict(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        package_version=_package_version(),
    )
    t_start = time.perf_counter()
    if writer is None:
        writer = RecordWriter(
            out, header, resume=resume, overwrite=overwrite, fsync_interval_s=fsync_interval_s
        )
    writer.open()
    run_id = str(writer.header["run_id"])
    done = set(writer.done)
    schedule = _Schedule(config, done)
    total = config.total()
    skipped = total - schedule.pending
    show = sys.stderr.isatty() if progress is None else progress
    bar = _Progress(total, skipped, show)
    slots: list[_Slot] = []
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    loop = asyncio.new_event_loop() if is_async else None
    n_slots = min(in_flight, schedule.pending)
    budget_key = config.budget_mode == "announced"
    written = calls = steps = 0

    def start(slot: _Slot, key: RecordKey) -> None:
        task_id, sample, budget = key
        env, spec_json = slot.stack(budget)
        seed, policy_seeds = episode_seeds(
            config.seed, task_id, sample, budget if budget_key else 0, budget
        )
        t0 = time.perf_counter()
        _, info = env.reset(seed=seed, options={"task_id": task_id})
        injection = None
        if config.error_after is not None:
            injection = {
                "after_expert_steps": config.error_after,
                "injected_actions": list(info.get("injected_actions", [])),
                "error_action": info.get("error_action"),
                "prefix_turns": info.get("prefix_turns"),
            }
        now = time.perf_counter()
        slot.episode = _Episode(
            key,
            env,
            slot.base,
            seed,
            policy_seeds,
            spec_json,
            t0,
            now - t0,
            injection,
            f"{task_id}/{sample}/{budget}",
        )

    def step(ep: _Episode, turn: _Turn, policy_s: float) -> None:
        # Runs once per live episode per turn: every line here is paid ~10^5 times a run.
        clock = time.perf_counter
        t0 = clock()
        text = turn.text
        _, reward, terminated, truncated, info = ep.env.step(text)
        ep.env_s.append(round(clock() - t0, 6))  # microseconds: what the record keeps
        ep.policy_s.append(policy_s)
        ep.actions.append(text)
        ep.rewards.append(float(reward))
        score = info.get("step_score")
        ep.step_scores.append(None if score is None else float(score))
        ep.parse_errors.append(bool(info.get("parse_error")))
        ep.logprobs.append(turn.logprob)
        ep.tokens.append(turn.tokens)
        if ep.first_success is None and info.get("success"):
            ep.first_success = len(ep.actions)
        if terminated or truncated:
            ep.done = True
            ep.terminated, ep.truncated = bool(terminated), bool(truncated)
            ep.truncation_reason = info.get("truncation_reason")
            ep.success = ep.first_success is not None

    def record(ep: _Episode) -> dict[str, Any]:
        task_id, sample, budget = ep.key
        return {
            "schema": SCHEMA_VERSION,
            "kind": "trajectory",
            "run_id": run_id,
            "env_id": config.env_id,
            "env_spec": ep.spec_json,
            "policy": policy.name,
            "task_id": task_id,
            "sample": sample,
            "seed": ep.seed,
            "budget_mode": config.budget_mode,
            "max_turns": budget,
            "turns": len(ep.actions),
            "success": ep.success,
            "first_success_turn": ep.first_success,
            "terminated": ep.terminated,
            "truncated": ep.truncated,
            "truncation_reason": ep.truncation_reason,
            "return": float(sum(ep.rewards)),
            "rewards": ep.rewards,
            "step_scores": ep.step_scores,
            "actions": ep.actions,
            "parse_errors": ep.parse_errors,
            "action_logprobs": ep.logprobs if any(x is not None for x in ep.logprobs) else None,
            "turn_tokens": ep.tokens if any(x is not None for x in ep.tokens) else None,
            "error_injection": ep.injection,
            "timings": {  # microsecond resolution: smaller lines, cheaper to encode
                "reset_s": round(ep.reset_s, 6),
                "env_step_s": ep.env_s,  # rounded as they were taken (policy_s: per tick)
                "policy_batch_s": ep.policy_s,
                "wall_s": round(time.perf_counter() - ep.started, 6),
            },
        }

    try:
        specs: dict[int, str | None] = {}
        for i in range(n_slots):
            slots.append(_Slot(factory(i == 0), config, specs))
        idle = list(slots)
        live: list[_Slot] = []
        while True:
            starts: list[tuple[_Slot, RecordKey]] = []
            for slot in idle:
                key = schedule.take(slot.last_task)
                if key is None:
                    break
                slot.last_task = key[0]
                starts.append((slot, key))
            idle = idle[len(starts) :]
            if pool is not None and len(starts) > 1:
                list(pool.map(lambda sk: start(*sk), starts))
            else:
                for slot, key in starts:
                    start(slot, key)
            live.extend(slot for slot, _ in starts)
            if not live:
                break
            episodes = [slot.episode for slot in live]
            requests = [
                TurnRequest(
                    ep.base.message_view(), ep.base, ep.policy_seeds[len(ep.actions)], ep.episode_id
                )
                for ep in episodes  # type: ignore[union-attr]
            ]
            t0 = time.perf_counter()
            replies = _call_policy(policy, requests, loop)
            policy_s = round(time.perf_counter() - t0, 6)  # once per tick, not per episode
            calls += 1
            turns = [_reply_turn(policy.name, r) for r in replies]
            if pool is not None and len(episodes) > 1:
                list(
                    pool.map(
                        lambda et, ps=policy_s: step(et[0], et[1], ps),
                        zip(episodes, turns),
                    )
                )
            else:
                for ep, turn in zip(episodes, turns):
                    step(ep, turn, policy_s)  # type: ignore[arg-type]
            steps += len(episodes)
            still: list[_Slot] = []
            finished = 0
            for slot in live:
                ep = slot.episode
                if ep is not None and ep.done:
                    writer.write(record(ep))
                    slot.episode = None
                    idle.append(slot)
                    finished += 1
                else:
                    still.append(slot)
            live = still
            written += finished
            bar.update(finished)
    finally:
        bar.close()
        for slot in slots:
            try:
                slot.close()
            except Exception as exc:  # closing must not hide the original error
                print(f"warning: closing an env failed: {exc}", file=sys.stderr)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if loop is not None:
            loop.close()
        writer.close()
    return RunSummary(
        path=str(out),
        run_id=run_id,
        total=total,
        skipped=skipped,
        written=written,
        policy_calls=calls,
        steps=steps,
        wall_s=time.perf_counter() - t_start,
        repaired_bytes=writer.repaired_bytes,
    )
