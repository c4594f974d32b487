"""The local runner: N tasks x K samples under a turn budget in this process, records streamed.

Design:

* **One batched policy call per tick.** A fixed pool of ``in_flight`` env instances (each made
  with ``gym.make(env_id, **env_kwargs)`` and wrapped by :func:`~.replay.budget_stack`, the
  stack a replay rebuilds) holds the live episodes. Each tick collects one :class:`TurnRequest`
  per live episode, makes ONE policy call for all of them (:class:`PolicyCaller`), and steps
  every env with its reply. A finished episode writes its record and its slot takes the next
  pending episode, so the batch stays full; the batch mixes episodes at different turns,
  which a batched backend does not care about.
* **The async path.** An async policy (HTTP backends) runs its ``aact`` on the caller's one
  event loop, and so do the envs' steps of that tick (:func:`~multiturn_envs.core.astep_env`):
  envs that wait on I/O (Docker sandboxes: ``blocking_io``) run concurrently in worker
  threads, the others inline. The tick barrier stays, because the protocol wants the whole
  batch in one call.
* **Slow envs with a sync policy** (Docker sandboxes, databases) are stepped and reset
  concurrently by a thread pool of ``workers`` threads; with ``workers=1`` (the default, right
  for pure-Python envs such as FrozenLake) they are stepped inline, since a thread hop costs
  more than such a step.
* **Hidden vs announced budget.** Hidden (default): one run at ``max_turns`` gives the whole
  Pass@(K,T) surface, because the first T turns of a T_max rollout are distributed like a
  budget-T rollout. Announced: the policy is told its budget, so every T of ``turn_grid`` gets
  its own episodes (the key carries T).
* **Seeds**: :class:`~.config.EpisodeSeeds` (per key, never per position or schedule).
* **Memory.** Only the episodes in flight are held; each record is written when its episode
  ends. The schedule keeps one lazy generator and one counter per task (task affinity, see
  :class:`_Schedule`), never the list of all episodes.
* **Clean-up.** Envs, threads and the event loop are closed on every exit path, including an
  exception from the policy and ``KeyboardInterrupt``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym

from multiturn_envs.core import TextEnv, astep_env
from multiturn_envs.episode import ENDS, make_env
from multiturn_envs.errors import PolicyError
from multiturn_envs.harness.config import EpisodeSeeds, RunOptions, RunSummary
from multiturn_envs.harness.progress import ProgressLine
from multiturn_envs.harness.records import (
    ErrorInjectionInfo,
    MemoryWriter,
    RecordWriter,
    TrajectoryRecord,
)
from multiturn_envs.harness.replay import budget_stack
from multiturn_envs.harness.run_config import SCHEMA_VERSION, EvalConfig, RecordKey
from multiturn_envs.policies.base import (
    AsyncPolicy,
    Policy,
    PolicyCaller,
    Reply,
    TokenUsage,
    TurnRequest,
    TurnTokens,
)
from multiturn_envs.policies.token_sequences import reply_tokens
from multiturn_envs.policies.tool_layout import replies_stop
from multiturn_envs.tools import ToolCall
from multiturn_envs.wrappers import text_env_of

__all__ = ["EnvFactory", "run_local"]

EnvFactory = Callable[[], gym.Env[str, str]]


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
        done_per_task: dict[str, int] = {}
        wanted = set(config.tasks)
        budget_set = set(budgets)
        for task, sample, budget in done:  # O(done), not O(samples): samples may be huge
            if task in wanted and 0 <= sample < config.samples and budget in budget_set:
                done_per_task[task] = done_per_task.get(task, 0) + 1
        self._left: dict[str, int] = {}
        self._iters: dict[str, Iterator[RecordKey]] = {}
        for task in config.tasks:
            left = len(budgets) * config.samples - done_per_task.get(task, 0)
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


@dataclass(slots=True)
class _Episode:
    key: RecordKey
    env: gym.Env[str, str]
    base: TextEnv
    seeds: EpisodeSeeds
    spec_json: str | None
    started: float
    reset_s: float
    injection: ErrorInjectionInfo | None
    episode_id: str = ""
    token_limit: int | None = None
    tokens_spent: int = 0
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    step_scores: list[float | None] = field(default_factory=list)
    parse_errors: list[bool] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    tokens: list[TurnTokens | None] = field(default_factory=list)
    prompt_tokens: list[int | None] = field(default_factory=list)
    completion_tokens: list[int | None] = field(default_factory=list)
    env_s: list[float] = field(default_factory=list)
    policy_s: list[float] = field(default_factory=list)
    first_success: int | None = None
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    truncation_reason: str | None = None
    success: bool = False
    agent_stopped: bool = False
    stop_tokens: list[int] | None = None
    """The tokens of the reply that stopped the episode (paid for, but no turn)."""

    def request(self) -> TurnRequest:
        base = self.base
        return TurnRequest(
            base.message_view(),
            base,
            self.seeds.policy_seed(len(self.actions)),
            self.episode_id,
            base.system_prompt(),
            tuple(base.tools()),
            base.tool_system_prompt(),
        )


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
            env = budget_stack(self.raw, budget, self.config.budget_mode, self.config.error_after)
            if budget not in self._specs:
                self._specs[budget] = _spec_json(env)
            self._stacks[budget] = (env, self._specs[budget])
        return self._stacks[budget]

    def close(self) -> None:
        self.raw.close()


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


@dataclass(frozen=True, slots=True)
class _Turn:
    """What the runner keeps of one reply: the action and what an LLM backend knew of it."""

    text: str
    logprob: float | None
    tokens: TurnTokens | None
    tool_calls: list[ToolCall] | None = None  # None: a text-mode reply
    usage: TokenUsage | None = None

    @staticmethod
    def of(reply: Reply) -> _Turn:
        logprob = None if reply.logprobs is None else float(sum(reply.logprobs))
        return _Turn(reply.text, logprob, reply_tokens(reply), reply.tool_calls, reply.usage)


class _LocalRun:
    """One call of :func:`run_local`: the env pool, the schedule and the tick loop."""

    def __init__(
        self,
        config: EvalConfig,
        policy: Policy | AsyncPolicy,
        writer: RecordWriter,
        make_env: EnvFactory | None,
        in_flight: int,
        workers: int,
        progress: ProgressLine | None,
    ) -> None:
        self.config = config
        self.policy_name = policy.name
        self.caller = PolicyCaller(policy)
        self.writer = writer
        self.make_env = make_env
        self.run_id = str(writer.header["run_id"])
        self.schedule = _Schedule(config, set(writer.done))
        self.total = config.total()
        self.skipped = self.total - self.schedule.pending
        self.in_flight = in_flight
        self.pool = ThreadPoolExecutor(workers) if workers > 1 else None
        self.progress = progress
        self.announced = config.budget_mode == "announced"
        self.slots: list[_Slot] = []
        self.written = self.calls = self.steps = 0

    def _factory(self, first: bool) -> gym.Env[str, str]:
        if self.make_env is not None:
            return self.make_env()
        # Gymnasium's passive checker inspects the first reset and step of each instance
        # (~15 ms for a text env); one checked instance per run is enough.
        return make_env(self.config.env_id, self.config.env_kwargs, checker=first)

    def _start(self, slot: _Slot, key: RecordKey) -> None:
        task_id, sample, budget = key
        env, spec_json = slot.stack(budget)
        seeds = EpisodeSeeds(self.config.seed, task_id, sample, budget if self.announced else 0)
        t0 = time.perf_counter()
        _, info = env.reset(seed=seeds.env_seed, options={"task_id": task_id})
        injection: ErrorInjectionInfo | None = None
        if self.config.error_after is not None:
            injection = {
                "after_expert_steps": self.config.error_after,
                "injected_actions": list(info.get("injected_actions", [])),
                "error_action": info.get("error_action"),
                "prefix_turns": info.get("prefix_turns"),
            }
        now = time.perf_counter()
        slot.episode = _Episode(
            key,
            env,
            slot.base,
            seeds,
            spec_json,
            t0,
            now - t0,
            injection,
            f"{task_id}/{sample}/{budget}",
            self.config.token_limit,
        )

    @staticmethod
    def _stops(ep: _Episode, turn: _Turn) -> bool:
        """The one rule: a tool-mode reply without a call ends the episode, not a turn."""
        if replies_stop(turn.tool_calls, turn.text, ep.base.reply_without_call):
            ep.done = ep.agent_stopped = True
            ep.success = ep.first_success is not None
            if turn.usage is not None:
                ep.stop_tokens = [turn.usage.prompt_tokens, turn.usage.completion_tokens]
            return True
        return False

    @classmethod
    def _step(cls, ep: _Episode, turn: _Turn, policy_s: float) -> None:
        # Runs once per live episode per turn: every line here is paid ~10^5 times a run.
        if turn.tool_calls is not None and cls._stops(ep, turn):
            return
        clock = time.perf_counter
        t0 = clock()
        text = turn.text
        _, reward, terminated, truncated, info = ep.env.step(text)
        cls._took(ep, turn, policy_s, round(clock() - t0, 6), reward, terminated, truncated, info)

    @classmethod
    async def _astep(cls, ep: _Episode, turn: _Turn, policy_s: float) -> None:
        """:meth:`_step` on the async path: the env steps without holding the loop."""
        if turn.tool_calls is not None and cls._stops(ep, turn):
            return
        t0 = time.perf_counter()
        _, reward, terminated, truncated, info = await astep_env(ep.env, turn.text)
        elapsed = round(time.perf_counter() - t0, 6)
        cls._took(ep, turn, policy_s, elapsed, reward, terminated, truncated, info)

    @staticmethod
    def _took(
        ep: _Episode,
        turn: _Turn,
        policy_s: float,
        env_s: float,
        reward: Any,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> None:
        text = turn.text
        ep.env_s.append(env_s)  # microseconds: what the record keeps
        ep.policy_s.append(policy_s)
        ep.actions.append(text)
        ep.rewards.append(float(reward))
        score = info.get("step_score")
        ep.step_scores.append(None if score is None else float(score))
        ep.parse_errors.append(bool(info.get("parse_error")))
        ep.logprobs.append(turn.logprob)
        ep.tokens.append(turn.tokens)
        usage = turn.usage
        if usage is None:
            ep.prompt_tokens.append(None)
            ep.completion_tokens.append(None)
        else:
            ep.prompt_tokens.append(usage.prompt_tokens)
            ep.completion_tokens.append(usage.completion_tokens)
            ep.tokens_spent += usage.total
        if ep.first_success is None and info.get("success"):
            ep.first_success = len(ep.actions)
        if terminated or truncated:
            ep.done = True
            ep.terminated, ep.truncated = bool(terminated), bool(truncated)
            ep.truncation_reason = info.get("truncation_reason")
            ep.success = ep.first_success is not None
        elif ep.token_limit is not None:
            if usage is None:
                raise PolicyError(
                    f"the run has a token limit ({ep.token_limit}) but the policy reported no "
                    f"tokens for a reply (episode {ep.episode_id}); a policy must set "
                    "Reply.usage for a token limit to hold"
                )
            if ep.tokens_spent >= ep.token_limit:  # the turn budget's way: truncated
                ep.done = ep.truncated = True
                ep.truncation_reason = ENDS["token_limit"].name
                ep.success = ep.first_success is not None

    def _record(self, ep: _Episode) -> TrajectoryRecord:
        task_id, sample, budget = ep.key
        return {
            "schema": SCHEMA_VERSION,
            "kind": "trajectory",
            "run_id": self.run_id,
            "env_id": self.config.env_id,
            "env_spec": ep.spec_json,
            "policy": self.policy_name,
            "task_id": task_id,
            "sample": sample,
            "seed": ep.seeds.env_seed,
            "budget_mode": self.config.budget_mode,
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
            "prompt_tokens": ep.prompt_tokens
            if any(x is not None for x in ep.prompt_tokens)
            else None,
            "completion_tokens": ep.completion_tokens
            if any(x is not None for x in ep.completion_tokens)
            else None,
            "stop_tokens": ep.stop_tokens,
            "error_injection": ep.injection,
            "agent_stopped": ep.agent_stopped,
            "timings": {  # microsecond resolution: smaller lines, cheaper to encode
                "reset_s": round(ep.reset_s, 6),
                "env_step_s": ep.env_s,  # rounded as they were taken (policy_s: per tick)
                "policy_batch_s": ep.policy_s,
                "wall_s": round(time.perf_counter() - ep.started, 6),
            },
        }

    async def _aturn(self, episodes: list[_Episode]) -> None:
        """The async path's tick: the policy awaited, then every env stepped concurrently."""
        requests = [ep.request() for ep in episodes]
        t0 = time.perf_counter()
        replies = await self.caller.acall(requests)
        policy_s = round(time.perf_counter() - t0, 6)
        turns = [_Turn.of(r) for r in replies]
        await asyncio.gather(*(self._astep(e, t, policy_s) for e, t in zip(episodes, turns)))

    def _tick(self, live: list[_Slot]) -> list[_Slot]:
        """One batched policy call for every live episode, each env stepped; the unfinished."""
        episodes = [slot.episode for slot in live if slot.episode is not None]
        if self.caller.is_async:
            self.caller.run(self._aturn(episodes))
            self.calls += 1
            self.steps += len(episodes)
            return self._finish(live)
        requests = [ep.request() for ep in episodes]
        t0 = time.perf_counter()
        replies = self.caller(requests)
        policy_s = round(time.perf_counter() - t0, 6)  # once per tick, not per episode
        self.calls += 1
        turns = [_Turn.of(r) for r in replies]
        if self.pool is not None and len(episodes) > 1:
            list(self.pool.map(self._step, episodes, turns, [policy_s] * len(episodes)))
        else:  # the hot path of pure-Python envs: no thread hop, no per-step closure
            step = self._step
            for episode, turn in zip(episodes, turns):
                step(episode, turn, policy_s)
        self.steps += len(episodes)
        return self._finish(live)

    def _finish(self, live: list[_Slot]) -> list[_Slot]:
        """Write the records of the episodes that ended; the slots still running."""
        still: list[_Slot] = []
        finished = 0
        for slot in live:
            ep = slot.episode
            if ep is not None and ep.done:
                self.writer.write(self._record(ep))
                slot.episode = None
                finished += 1
            else:
                still.append(slot)
        self.written += finished
        if self.progress is not None:
            self.progress.update(finished)
        return still

    def run(self) -> None:
        specs: dict[int, str | None] = {}
        for i in range(min(self.in_flight, self.schedule.pending)):
            self.slots.append(_Slot(self._factory(i == 0), self.config, specs))
        idle = list(self.slots)
        live: list[_Slot] = []
        while True:
            starts: list[tuple[_Slot, RecordKey]] = []
            for slot in idle:
                key = self.schedule.take(slot.last_task)
                if key is None:
                    break
                slot.last_task = key[0]
                starts.append((slot, key))
            idle = idle[len(starts) :]
            if self.pool is not None and len(starts) > 1:
                list(self.pool.map(self._start, *zip(*starts)))
            else:
                for slot, key in starts:
                    self._start(slot, key)
            live.extend(slot for slot, _ in starts)
            if not live:
                break
            still = self._tick(live)
            idle.extend(slot for slot in live if slot.episode is None)
            live = still

    def close(self) -> None:
        for slot in self.slots:
            try:
                slot.close()
            except Exception as exc:  # closing must not hide the original error
                print(f"warning: closing an env failed: {exc}", file=sys.stderr)
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.caller.close()


def run_local(
    config: EvalConfig,
    policy: Policy | AsyncPolicy,
    writer: RecordWriter,
    options: RunOptions,
) -> RunSummary:
    """Run, in this process, every episode of ``config`` whose key ``writer`` does not hold.

    ``writer`` is opened here and closed on every exit path; its ``done`` keys are skipped and
    its header's ``run_id`` is stamped on the records (a Ray worker passes a writer that
    streams to the driver). :func:`~multiturn_envs.harness.rollout.run_eval` is the public
    entry point; this is what its local executor and every Ray worker run.
    """
    t_start = time.perf_counter()
    writer.open()
    run: _LocalRun | None = None
    bar: ProgressLine | None = None
    show = sys.stderr.isatty() if options.progress is None else options.progress
    try:
        run = _LocalRun(
            config, policy, writer, options.make_env, options.in_flight, options.workers, None
        )
        bar = ProgressLine(config.total(), run.skipped, show)
        run.progress = bar
        run.run()
    finally:
        if bar is not None:
            bar.close()
        if run is not None:
            run.close()
        writer.close()
    return RunSummary(
        path=str(writer.path),
        run_id=run.run_id,
        total=run.total,
        skipped=run.skipped,
        written=run.written,
        policy_calls=run.calls,
        steps=run.steps,
        wall_s=time.perf_counter() - t_start,
        repaired_bytes=writer.repaired_bytes,
        records=writer.records if isinstance(writer, MemoryWriter) else None,
    )
