"""verifiers adapter: any MT/* env as a ``verifiers`` (v1) multi-turn taskset and env.

verifiers 0.4 has only its v1 API (``import verifiers.v1 as vf``); v0's ``MultiTurnEnv``,
``env_response`` and ``Rubric`` are gone. A multi-turn environment there is a ``Taskset`` (the
tasks), a ``Task`` (rubric functions: ``@vf.reward`` / ``@vf.metric``) and an ``Env`` whose
``run(task, agents)`` holds the conversation. Here:

* :class:`MTTaskset` yields one :class:`MTTask` per (task id, seed) of the configured env
  (:class:`MTTasksetConfig`: ``env_id``, ``env_kwargs``, ``tasks`` or ``num_tasks``, ``seeds``,
  ``max_turns``, ``budget_mode``, ``error_after``); a task's data is the row the episode kit
  reads (:class:`~multiturn_envs.episode.EpisodeStart`).
* :class:`MTEnv` runs the episode host-side: the env's first observation is the first user
  turn, each reply is one ``env.step``, the next observation the next user turn, until the env
  ends the episode (success, terminal state, turn budget) or the agent's own cap stops it
  (``trace.info["mt"]["end"]`` says which: ``terminated``, ``truncated`` or ``agent_cap``).
  Env calls that wait on I/O (containers) run in a worker thread, others inline
  (:func:`multiturn_envs.core.astep_env`), so a slow sandbox step never blocks the event loop
  other rollouts share. The episode is kept in an
  :class:`~multiturn_envs.episode.EpisodeLog`; ``trace.info["mt"]`` is derived from it
  (:func:`trace_dict`).
* Rubric (:class:`MTTask`): reward ``success`` (weight 1, the registry's ``success``) and
  reward ``step_score``, the registry's ``mean_step_score`` over the agent's turns (weight
  :data:`STEP_SCORE_WEIGHT`; subclass to change it); metrics ``turns``, ``env_return`` (the
  registry's ``outcome``) and ``first_success_turn`` (-1: never). The trace's reward, success
  + 0.1 x the mean raw step score, is *not* the study's process reward (registry
  ``process``); with ``MTTasksetConfig.reward`` set (a registered name, e.g. ``"process"``)
  the tasks are :class:`MTRewardTask`, whose one reward is that registered reward's score.
  The rubric reads the episode :class:`MTEnv` stores in ``trace.info["mt"]`` (per-turn
  rewards, step scores, and the ``info`` keys rewards read: ``start``, ``infos``), so any
  registered reward can be computed from a trace (:func:`episode_of`).
* Per-step credit (verifiers keeps one scalar per trace): ``trace.info["turn_rewards"]``,
  one entry per sampled turn, is the score of the episode so far under the configured reward
  (default ``outcome``) after that turn (``None`` for a reply that took no turn), which is the
  state-of-the-world score prime-rl's ``turn_credit`` algorithm reads (it takes per-turn
  deltas: a turn earns what it added); ``trace.info["turn_credits"]`` are the registry's
  per-turn credits themselves (they sum to the score).
* Tools (``MTTasksetConfig.tools``): the env's typed tools in the task's system prompt (the
  Hermes wording: verifiers' harnesses do not forward an env's tools), each reply's tool
  calls (an assistant message's ``tool_calls``, else Hermes ``<tool_call>`` blocks) are the
  action, observations come back as ``<tool_response>`` blocks, and a reply without a call
  ends the episode where the env says so (the harness's and TRL's rule).

``vf-eval`` loads a taskset by id from a top-level module whose ``__all__`` exports one
``Taskset`` and optionally one ``Env`` subclass, e.g. a file ``mt_envs_vf.py``::

    from multiturn_envs.adapters.verifiers import MTEnv, MTTaskset
    __all__ = ["MTEnv", "MTTaskset"]

then ``vf-eval mt-envs-vf --env.taskset.env-id MT/FrozenLake-v0 ...`` (docs/ecosystem.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.core import aclose_env, astep_env
from multiturn_envs.episode import EpisodeLog, EpisodeStart, make_env
from multiturn_envs.policies.tool_layout import hermes_system, parse_hermes, replies_stop
from multiturn_envs.rewards import (
    Episode,
    MeanStepScore,
    Outcome,
    Success,
    make_reward,
    slim_info,
)
from multiturn_envs.tools import ToolCall, call_from_openai
from multiturn_envs.wrappers.turn_budget import text_env_of

STEP_SCORE_WEIGHT = 0.1
"""Weight of the mean oracle step score in the trace's reward (success has weight 1)."""


class MTTasksetConfig(vf.TasksetConfig):
    env_id: str = "MT/FrozenLake-v0"
    """A registered MT id."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``gym.make`` keyword arguments."""
    tasks: list[str] | None = None
    """Task ids; default: the first ``num_tasks`` of ``env.task_ids()``."""
    num_tasks: int = 8
    seeds: list[int] = Field(default_factory=lambda: [0])
    """Each task runs once per seed (the reset seed)."""
    max_turns: int = 8
    budget_mode: str = "hidden"
    error_after: int | None = None
    """Start each episode in an error state: this many expert steps, then one wrong action."""
    reward: str | None = None
    """A registered reward (``"process"``, ...): the tasks' one reward; ``None``: the default
    rubric (success + 0.1 x mean step score). ``turn_rewards`` use it (default ``outcome``)."""
    tools: bool = False
    """Offer the env's typed tools and read tool calls as the actions."""


class MTTaskData(vf.TaskData):
    env_id: str
    env_kwargs: dict[str, Any]
    task_id: str
    seed: int
    max_turns: int
    budget_mode: str
    error_after: int | None = None
    reward: str | None = None
    tools: bool = False


class MTTask(vf.Task[MTTaskData, vf.State, vf.TaskConfig]):
    """One episode; its rubric reads what :class:`MTEnv` stored in ``trace.info["mt"]``."""

    @vf.reward(weight=1.0)
    async def success(self, trace: Any) -> float:
        return Success().score(episode_of(trace))

    @vf.reward(weight=STEP_SCORE_WEIGHT)
    async def step_score(self, trace: Any) -> float:
        return MeanStepScore().score(episode_of(trace))

    @vf.metric
    async def turns(self, trace: Any) -> float:
        return float(_episode(trace).get("turns", 0))

    @vf.metric
    async def env_return(self, trace: Any) -> float:
        return Outcome().score(episode_of(trace))

    @vf.metric
    async def first_success_turn(self, trace: Any) -> float:
        first = _episode(trace).get("first_success_turn")
        return -1.0 if first is None else float(first)


class MTRewardTask(MTTask):
    """One episode whose one reward is a registered reward's score (``MTTasksetConfig.reward``)."""

    async def success(self, trace: Any) -> float:  # undecorated: no longer a reward
        return Success().score(episode_of(trace))

    async def step_score(self, trace: Any) -> float:  # undecorated: no longer a reward
        return MeanStepScore().score(episode_of(trace))

    @vf.reward(weight=1.0)
    async def registered(self, trace: Any) -> float:
        return make_reward(self.data.reward or "outcome").score(episode_of(trace))


def _episode(trace: Any) -> dict[str, Any]:
    return dict(trace.info.get("mt") or {})


def episode_of(trace: Any) -> Episode:
    """The episode :class:`MTEnv` stored in a trace, as rewards read it
    (:mod:`multiturn_envs.rewards`). A record without ``infos`` (an older trace) is rebuilt
    from its per-turn rewards and step scores and its final success."""
    stored = _episode(trace)
    rewards = [float(r) for r in stored.get("rewards", [])]
    infos = stored.get("infos")
    if infos is None:
        scores = list(stored.get("step_scores", []))
        success = bool(stored.get("success"))
        infos = [
            {"step_score": s, "success": success and t == len(scores) - 1}
            for t, s in enumerate(scores)
        ]
    done = stored.get("end") in ("terminated", "truncated")
    return Episode.of(dict(stored.get("start") or {}), rewards, infos, done=done)


class MTTaskset(vf.Taskset[MTTask, MTTasksetConfig]):
    """The tasks of one MT env: every (task id, seed) pair, with the env's system prompt."""

    def load(self) -> Iterator[MTTask]:
        config = self.config
        env = make_env(config.env_id, config.env_kwargs)
        try:
            base = text_env_of(env)
            tasks = config.tasks or [str(t) for t in base.task_ids()[: config.num_tasks]]
            task_cls = MTTask if config.reward is None else MTRewardTask
            if config.reward is not None:
                make_reward(config.reward)  # a bad name fails at load, not mid-rollout
            for task_id in tasks:
                env.reset(seed=0, options={"task_id": task_id})
                system = base.system_prompt() or None
                if config.tools:
                    system = hermes_system(base.tool_system_prompt(), base.tools())
                for seed in config.seeds:
                    yield task_cls(
                        MTTaskData(
                            name=f"{config.env_id}:{task_id}#{seed}",
                            prompt=None,  # the env opens the conversation (first observation)
                            system_prompt=system,
                            env_id=config.env_id,
                            env_kwargs=dict(config.env_kwargs),
                            task_id=task_id,
                            seed=int(seed),
                            max_turns=config.max_turns,
                            budget_mode=config.budget_mode,
                            error_after=config.error_after,
                            reward=config.reward,
                            tools=config.tools,
                        ),
                        config.task,
                    )
        finally:
            env.close()


class MTEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class MTEnv(vf.Env[MTEnvConfig]):
    """Runs one MT episode with the ``player`` agent; the env plays the user."""

    async def run(self, task: MTTask, agents: Any) -> None:
        data = task.data
        start = EpisodeStart.from_row(
            {**data.model_dump(include=set(EPISODE_FIELDS)), "reward": data.reward or "outcome"}
        )
        env = await asyncio.to_thread(make_env, data.env_id, data.env_kwargs)
        log = EpisodeLog(start.reward)
        turn_rewards: list[float | None] = []
        try:
            base = text_env_of(env)
            observation, info = await start.areset(env)
            log.begin(info, seed=start.seed)
            async with agents.player.interaction(task) as interaction:
                # the rubric scores when the interaction closes: the record must be there
                info_of = interaction.trace.info
                info_of["turn_rewards"] = turn_rewards
                try:
                    info_of["mt"] = trace_dict(log)
                    segment = await interaction.turn(observation)
                    while True:
                        if segment.terminated:
                            log.stop("turn_cap")
                            break
                        action, calls = _action_of(segment, data.tools)
                        if replies_stop(calls, action, base.reply_without_call):
                            log.stop("agent_stopped")
                            turn_rewards.append(None)  # a sampled reply that took no turn
                            break
                        observation, reward, terminated, truncated, info = await astep_env(
                            env, action
                        )
                        log.add(reward, terminated, truncated, info)
                        turn_rewards.append(float(log.score))
                        if data.tools:
                            observation = f"<tool_response>\n{observation}\n</tool_response>"
                        if terminated or truncated:
                            break
                        info_of["mt"] = trace_dict(log)
                        segment = await interaction.turn(observation)
                finally:
                    info_of["mt"] = trace_dict(log)
                    info_of["turn_credits"] = [float(c) for c in log.credits]
        finally:
            await aclose_env(env)  # after any step still running (a cancelled one's)


EPISODE_FIELDS = ("task_id", "seed", "max_turns", "budget_mode", "error_after")
"""The task data's fields an episode starts from (its reward is read beside them)."""

ENDS_HERE: dict[str, str] = {"turn_cap": "agent_cap"}
"""``trace.info["mt"]["end"]`` of an end the agent or verifiers made, where its name differs
from the one vocabulary's (an env's end is ``terminated`` or ``truncated``, its flags)."""


def trace_dict(log: EpisodeLog) -> dict[str, Any]:
    """``trace.info["mt"]``: the episode as :class:`MTEnv` stores it in a trace, derived from
    its log (what :func:`episode_of` and the rubric read back)."""
    end: str | None = None
    if log.end is not None and log.end.by == "env":
        end = "truncated" if log.turns and log.turns[-1].truncated else "terminated"
    elif log.end is not None:
        end = ENDS_HERE.get(log.end.name, log.end.name)
    return {
        "task_id": log.task_id,
        "seed": log.seed,
        "turns": len(log.turns),
        "rewards": log.rewards,
        "step_scores": log.step_scores,
        "success": bool(log.turns) and log.success,
        "first_success_turn": log.first_success,
        "end": end,
        "start": slim_info(log.start),
        "infos": [slim_info(t.info) for t in log.turns],
    }


def _action_of(segment: Any, tools: bool) -> tuple[str, list[ToolCall] | None]:
    """The action of a segment's reply and, with tools, its calls: an assistant message's
    ``tool_calls`` (a harness that forwards tools), else the Hermes blocks of the reply."""
    reply = segment.last_reply or ""
    if not tools:
        return reply, None
    for message in reversed(list(getattr(segment, "messages", []) or [])):
        entries = getattr(message, "tool_calls", None)
        if entries:
            if not isinstance(entries, list | tuple):
                entries = [entries]  # one malformed entry: the env says what is wrong with it
            read = [call_from_openai(_entry(e)) for e in entries]
            calls = [c for c in read if isinstance(c, ToolCall)]
            return "\n".join(c.text() if isinstance(c, ToolCall) else c for c in read), calls
        if getattr(message, "role", None) == "assistant":
            break
    action, found = parse_hermes(reply)
    return (reply, []) if found is None else (action, found)


def _entry(entry: Any) -> Any:
    """A ``tool_calls`` entry as plain JSON: a pydantic model (verifiers' messages) dumped, any
    other value as it is (:func:`~multiturn_envs.tools.call_from_openai` reads any shape)."""
    dump = getattr(entry, "model_dump", None)
    if not isinstance(entry, dict) and callable(dump):
        try:
            return dump()
        except Exception:  # a model that cannot dump itself: the env sees what it is
            return repr(entry)[:200]
    return entry


__all__ = [
    "EPISODE_FIELDS",
    "MTEnv",
    "MTEnvConfig",
    "MTRewardTask",
    "MTTask",
    "MTTaskData",
    "MTTaskset",
    "MTTasksetConfig",
    "episode_of",
    "trace_dict",
]
