"""TRL adapter: any MT/* env as an ``environment_factory`` environment of TRL's ``GRPOTrainer``.

TRL's multi-turn interface (trl 1.16, ``GRPOTrainer(environment_factory=...)``) works like this:
the trainer builds one environment instance per rollout (pooled and reused), calls
``reset(**row)`` with every column of the dataset row, appends the returned string to the row's
last user message, and exposes every public method of the environment's class as a *tool* the
model calls in its chat template's tool-call syntax. Each tool result goes back to the model as a
``tool`` message and generation continues, until the model answers without a tool call or
``max_tool_calling_iterations`` is reached. ``get_reward()`` is called once per finished rollout
and is the environment's reward (weight 1, beside any ``reward_funcs``).

:class:`TRLEnvironment` maps that onto the env contract:

* ``reset(**row)`` reads the row through the episode kit's one reader
  (:class:`~multiturn_envs.episode.EpisodeStart`: ``task_id``, ``seed``, ``max_turns``,
  ``budget_mode``, ``error_after``, ``reward``; other columns, ``prompt`` included, are ignored)
  and returns the env's first observation. The ``G`` rollouts of one GRPO group share a row,
  hence the same task, start and budget; rows with a ``max_turns`` column give a per-row
  budget, and an env wrapped in :class:`~multiturn_envs.wrappers.BudgetMix` draws the budget
  from the row's seed: TRL's interface can express the study's per-reset budgets. The row's
  budget travels as reset options, so it applies to that episode only and wins over the env's
  wrappers and defaults (the precedence of :meth:`multiturn_envs.core.TextEnv.reset`); this
  adapter never sets a budget on the env.
* **Typed tools** (``tools="env"``, the default of :func:`environment_factory`): the env's own
  tools (:meth:`~multiturn_envs.core.TextEnv.tools`), one typed method each (FrozenLake's
  ``move(direction)`` with an enum, SQL's ``execute_sql(query)`` and ``submit()``, ...), as
  TRL's docs ask, built by :func:`trl_environment_class`: the method's type hints and ``Args``
  docstring render exactly the env's declared schema (tested), and a call is one env turn,
  its result the env's next observation. A call with wrong arguments is a turn too: the env
  reads it and says what is wrong, as in the harness. ``tools="act"``: the generic
  ``act(action: str)`` tool of :class:`TRLEnvironment` (the study's recorded layout).
  Either way a reply without a tool call is not an action and ends the rollout (TRL's rule,
  the harness's too: :func:`multiturn_envs.policies.tool_layout.replies_stop`); after the
  episode ends (success, a terminal state or the turn budget) a call steps nothing and says
  so, so the env's budget, not TRL's iteration cap, is the budget.
* ``get_reward()`` is the score of the episode under a registered reward
  (:mod:`multiturn_envs.rewards`, docs/rewards.md), the row's ``reward`` when it names one,
  else the environment's: ``reward="outcome"`` (the default; the sum of the env's rewards:
  wrap the env in :class:`~multiturn_envs.wrappers.ProcessReward` for the oracle's step
  scores), ``"success"`` (1.0 for a solved task), ``{"name": "process", "weight": w}`` (the
  study's process reward as we train with it: the return plus ``w`` x
  :attr:`TRLEnvironment.process_score`), or any other registered name, spec or reward object.
* How the episode ran is one :class:`~multiturn_envs.episode.EpisodeLog`
  (:attr:`TRLEnvironmentBase.log`): the inspection properties (``turns``, ``step_scores``,
  ``process_score``, ...) are read from it, and so is the trainer (GiGPO takes the reward's
  per-turn credits from :attr:`TRLEnvironmentBase.episode`).
* The episode as chat: :attr:`TRLEnvironment.messages` (the env's own ``messages()``) and
  :func:`grpo_dataset` builds rows whose prompt carries the env's system prompt.

Only ``reset``, ``get_reward`` and the tools are public *methods*: TRL turns any other public
method into a tool, so everything else here is a property or private. Envs whose tools depend
on the task (BFCL's functions) get one class per tool set (:func:`environment_factories`, TRL's
``dict`` form, rows routed by their ``environment`` column).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import keyword
import operator
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast

import gymnasium as gym

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.core import TextEnv
from multiturn_envs.episode import ENDS, EpisodeLog, EpisodeStart, make_env
from multiturn_envs.rewards import (
    Episode,
    Reward,
    RewardSpec,
    make_reward,
    process_score,
    step_credit,
)
from multiturn_envs.tools import Action, Tool, ToolCall, action_text, json_text
from multiturn_envs.wrappers.turn_budget import text_env_of

RewardMode = RewardSpec
"""A registered reward: its name (``"outcome"``, ``"success"``, ...), ``{"name": ...,
**params}`` or object."""

__all__ = [
    "ENDED",
    "ENDED_TOOLS",
    "LAYOUTS",
    "TOOL_HINT",
    "RewardMode",
    "TRLEnvironment",
    "TRLEnvironmentBase",
    "close_environment",
    "end_note",
    "environment_factories",
    "environment_factory",
    "grpo_dataset",
    "grpo_rows",
    "row_system_prompt",
    "step_credit",
    "tool_functions",
    "tool_set_key",
    "trl_environment_class",
    "trl_reward",
]

RESERVED = frozenset({"reset", "get_reward"})
"""The methods TRL calls itself; every other public method of an environment is a tool."""

LAYOUTS: tuple[str, ...] = ("env", "act")
"""How turns map onto TRL tools: the env's typed tools, or one generic ``act(action)``."""

TOOL_HINT = (
    "Take each turn by calling the `act` tool with your move as its `action` argument; the tool "
    "returns what happens next. Stop calling it when the episode is over."
)
"""Appended to the env's system prompt by :func:`grpo_dataset`: how turns map onto the tool."""

ENDED = "The episode is over; no action was taken. Do not call act again."
"""What a call after the episode's end answers (the generic ``act`` layout)."""

ENDED_TOOLS = "The episode is over; no action was taken. Do not call a tool again."
"""What a call after the episode's end answers (the env's typed tools)."""


def end_note(success: bool, truncated: bool) -> str:
    """What :meth:`TRLEnvironment.act` appends to an episode's last observation: that the
    episode is over, and why (the note of its :data:`~multiturn_envs.episode.ENDS` entry:
    a solved task, a spent budget, a terminal state). A hidden budget's end shows nowhere
    else, so a model can only know from this that the episode ended (the SFT warm start
    shows it before its closing reply, as GRPO does)."""
    end = ENDS["success" if success else ("turn_budget" if truncated else "terminal")]
    return f"[The episode is over: {end.note}.]"


def _build(
    env: str | gym.Env[str, str] | Callable[[], gym.Env[str, str]], env_kwargs: dict[str, Any]
) -> gym.Env[str, str]:
    if isinstance(env, str):
        return make_env(env, env_kwargs)
    if env_kwargs:
        raise ValueError("env_kwargs only apply when env is an id")
    if isinstance(env, gym.Env):
        return env
    if callable(env):
        made = env()
        if not isinstance(made, gym.Env):
            raise TypeError(f"the env factory returned {type(made).__name__}, not a gym.Env")
        return made
    raise TypeError(f"env must be an id, a gym.Env or a factory, got {type(env).__name__}")


def trl_reward(reward: RewardMode = "outcome", step_weight: float | None = None) -> Reward:
    """The registry reward a ``TRLEnvironment(reward=...)`` scores with (a name, a
    ``{"name": ..., **params}`` spec or a reward object; old names warn and still work).

    ``step_weight`` is deprecated (one release): it was the process reward's ``weight`` and
    applied to ``reward="process"`` only, as it still does; write
    ``reward={"name": "process", "weight": w}``.
    """
    if step_weight is not None:
        warnings.warn(
            "step_weight is deprecated: name the weight in the reward, "
            f"reward={{'name': 'process', 'weight': {step_weight!r}}}",
            DeprecationWarning,
            stacklevel=3,
        )
        if not 0.0 <= float(step_weight) < float("inf"):
            raise ValueError(f"step_weight must be a finite number >= 0, got {step_weight!r}")
    made = make_reward(reward)
    if made.name == "process" and step_weight is not None and isinstance(reward, str):
        return make_reward("process", weight=float(step_weight))
    return made


class TRLEnvironmentBase:
    """One MT/* env as one environment of TRL's ``GRPOTrainer`` (one instance per rollout),
    without tools: :class:`TRLEnvironment` adds the generic ``act``, and
    :func:`trl_environment_class` the env's typed tools.

    Args:
        env: an env id (``"MT/FrozenLake-v0"``), a made env (wrappers such as ``BudgetMix`` or
            ``ProcessReward`` included), or a zero-argument factory of one.
        reward: a registered reward (docs/rewards.md): a name (``"outcome"``, the sum of the
            env's rewards over the episode; ``"success"``; ...), ``{"name": "process",
            "weight": w}`` or an object. A row's ``reward`` wins for its episode.
        step_weight: deprecated: the process reward's weight (write it in ``reward``).
        **env_kwargs: passed to ``gym.make`` when ``env`` is an id (e.g. ``max_turns=8``).

    Use :func:`environment_factory` to get the zero-argument callable TRL wants. Only
    ``reset``, ``get_reward`` and the tools are public *methods* (TRL turns any other public
    method into a tool); close an instance with :func:`close_environment`.
    """

    def __init__(
        self,
        env: str | gym.Env[str, str] | Callable[[], gym.Env[str, str]],
        *,
        reward: RewardMode = "outcome",
        step_weight: float | None = None,
        **env_kwargs: Any,
    ) -> None:
        self._reward = trl_reward(reward, step_weight)
        self._env: gym.Env[str, str] | None = _build(env, env_kwargs)
        self._base: TextEnv | None = text_env_of(self._env)
        self._idle = True
        self._log = EpisodeLog(self._reward)
        self._calls = 0

    # ------------------------------------------------------------------ TRL's interface
    def reset(self, **row: Any) -> str:
        """Start the episode of a dataset row; return its first observation.

        The row is read by :class:`~multiturn_envs.episode.EpisodeStart` (``task_id``,
        ``seed``, ``max_turns``, ``budget_mode``, ``error_after``, ``reward``; default: the
        env's own budget, this environment's reward). Other columns are ignored.
        """
        env = self._live_env()
        start = EpisodeStart.from_row(row)
        observation, info = start.reset(env)
        self._log.begin(info, seed=start.seed, reward=start.reward_or(self._reward))
        self._idle = False
        self._calls = 0
        return observation

    #: What a call after the episode's end answers.
    ended_text: str = ENDED_TOOLS

    def _take(self, action: Action) -> str:
        """One tool call: one env turn (nothing once the episode is over); its result."""
        self._calls += 1
        if self._idle or self._log.done:
            return self.ended_text
        env = self._live_env()
        observation, reward, terminated, truncated, info = env.step(action_text(action))
        self._log.add(reward, terminated, truncated, info)
        if terminated or truncated:
            return f"{observation}\n\n{end_note(self._log.success, bool(truncated))}"
        return observation

    def get_reward(self) -> float:
        """The rollout's reward: the episode's score under the configured reward."""
        return self._log.score

    # ------------------------------------------------------------------ inspection (no tools)
    def _live_env(self) -> gym.Env[str, str]:
        if self._env is None:
            raise RuntimeError(
                "this instance only renders its tools (tool_functions): TRL calls the tools "
                "of environments its environment_factory made"
            )
        return self._env

    @property
    def log(self) -> EpisodeLog:
        """How the episode ran (:class:`~multiturn_envs.episode.EpisodeLog`): what every
        property below reads, and what the trainer reads."""
        return self._log

    @property
    def reward(self) -> Reward:
        """The registry reward :meth:`get_reward` scores with (a row's own, for its episode)."""
        return self._log.reward

    @property
    def episode(self) -> Episode:
        """The episode so far as rewards read it (reset ``info`` and each turn taken)."""
        return self._log.episode

    @property
    def env(self) -> gym.Env[str, str]:
        """The (possibly wrapped) env this instance steps."""
        return self._live_env()

    @property
    def messages(self) -> list[dict[str, str]]:
        """The episode so far as chat: user (observation), assistant (action), ..."""
        return text_env_of(self._live_env()).messages()

    @property
    def infos(self) -> list[dict[str, Any]]:
        """The reset ``info`` and one ``info`` per turn taken (step scores, success, ...)."""
        return [cast(dict[str, Any], i) for i in self._log.infos] if self._log.start else []

    @property
    def turns(self) -> int:
        """Turns taken in this episode (tool calls that reached the env)."""
        return len(self._log.turns)

    @property
    def turn_rewards(self) -> list[float]:
        """The env's reward of each turn taken (their sum is the return)."""
        return self._log.rewards

    @property
    def step_scores(self) -> list[float]:
        """The oracle's score of each turn taken (turns without a score left out)."""
        return [s for s in self._log.step_scores if s is not None]

    @property
    def mean_step_score(self) -> float:
        """The mean of :attr:`step_scores` (0.0 before the first scored turn): the registry's
        ``mean_step_score``."""
        return self._log.mean_step_score

    @property
    def step_credits(self) -> list[float]:
        """:func:`~multiturn_envs.rewards.step_credit` of each turn taken (turns without a score
        left out)."""
        credits = (step_credit(t.info) for t in self._log.turns)
        return [c for c in credits if c is not None]

    @property
    def process_score(self) -> float:
        """The process part of the process reward (:func:`multiturn_envs.rewards.process_score`):
        :attr:`step_credits` summed, over the turns a solved episode took, and over the budget
        otherwise (a failure, a spent budget, a rollout that stopped calling ``act``: the turns
        not played earn 0, so ending early by a hole or by silence never pays more than playing
        on); in [0, 1]. Without a budget, the mean over the turns taken (which pays a good move
        followed by silence: give the env a budget for training)."""
        return process_score(self._log.episode)

    @property
    def calls(self) -> int:
        """``act`` calls in this episode, those after its end (not turns) included."""
        return self._calls

    @property
    def done(self) -> bool:
        """Whether the env ended the episode (or none was started)."""
        return self._idle or self._log.done

    @property
    def success(self) -> bool:
        return self._log.success

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()


def close_environment(environment: TRLEnvironmentBase) -> None:
    """Close an environment's env (and its sandbox, database, containers). Not a method:
    TRL would make a public method a tool. Idempotent."""
    environment._close()


def tool_functions(cls: type[TRLEnvironmentBase]) -> list[Callable[..., str]]:
    """The tools TRL renders for environments of ``cls`` (every public method but ``reset``
    and ``get_reward``, in TRL's order), bound to an instance without an env: for rendering
    schemas (a chat template, SFT examples, a tokenizer fitted to the tool chats), never
    called on a rollout. No env is built for them."""
    blank = cls.__new__(cls)
    blank._reward = make_reward("outcome")
    blank._env = blank._base = None
    blank._idle = True
    blank._log = EpisodeLog()
    blank._calls = 0
    return [
        getattr(blank, name)
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in RESERVED and not name.startswith("_")
    ]


class TRLEnvironment(TRLEnvironmentBase):
    """The generic layout: one tool, ``act(action)``, whose text is the turn's action (any text
    form the env reads, a ``<tool_call>`` text included). The study's recorded layout; new
    runs get the env's typed tools (:func:`trl_environment_class`)."""

    ended_text = ENDED

    def act(self, action: str) -> str:
        """Take one turn in the environment with the given action.

        Args:
            action: your move, as text in the format the environment asks for.

        Returns:
            The environment's observation after the move.
        """
        return self._take(action if isinstance(action, str) else json_text(action))


_JSON_HINTS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
    "array": list,
}


def _hint(schema: Mapping[str, Any]) -> Any:
    """The Python type hint ``transformers.utils.get_json_schema`` turns back into ``schema``
    (as far as type hints go: an enum, the type, list items; other keywords are lost)."""
    if schema.get("enum"):
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        hints = [_hint({**schema, "type": k}) for k in kind if k != "null"]
        base: Any = functools.reduce(operator.or_, hints) if hints else Any
        return base | None if "null" in kind and hints else base
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return list[_hint(schema["items"])]  # type: ignore[misc]
    return _JSON_HINTS.get(str(kind), Any)


def _method(tool: Tool) -> Callable[..., str]:
    """``tool`` as a typed method: its schema as type hints and a Google ``Args`` docstring (what
    TRL renders, through ``get_json_schema``), any arguments accepted at call time (the env
    reads the call and answers a wrong one, as it does for a model's malformed call)."""
    properties = dict(tool.parameters.get("properties") or {})
    required = set(tool.parameters.get("required") or [])
    for name in properties:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"tool {tool.name!r}: argument {name!r} is not a Python identifier")

    def call(self: TRLEnvironmentBase, **arguments: Any) -> str:
        return self._take(ToolCall(tool.name, arguments))

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines = [" ".join(tool.description.split()) or tool.name]
    if properties:
        lines += ["", "Args:"]
    for name, schema in properties.items():
        hint = _hint(schema)
        annotations[name] = hint
        default = inspect.Parameter.empty if name in required else None
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint
            )
        )
        text = " ".join(str(schema.get("description") or name).split())
        lines.append(f"    {name}: {text}")
    call.__name__ = tool.name
    call.__qualname__ = tool.name
    call.__doc__ = "\n".join(lines)
    call.__annotations__ = annotations
    call.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return call


def tool_set_key(tools: Sequence[Tool]) -> str:
    """A short stable id of a set of tools (TRL's environment name for it)."""
    text = json.dumps([t.openai() for t in tools], sort_keys=True)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]


def trl_environment_class(
    tools: Sequence[Tool], name: str = "TRLEnvironment"
) -> type[TRLEnvironmentBase]:
    """A :class:`TRLEnvironmentBase` subclass with one typed method per tool (TRL's idiom).

    ``name`` is the class name, which TRL logs the env's reward under
    (``rewards/<name>/mean``). A tool named like a reserved method (``reset``, ``get_reward``)
    or starting with ``_`` cannot be a TRL tool: ``ValueError``.
    """
    if not tools:
        raise ValueError("the env declares no tools: use tools='act' (the generic act tool)")
    methods: dict[str, Any] = {}
    for tool in tools:
        attr = tool.name.replace(".", "_").replace("-", "_")
        if attr in RESERVED or attr.startswith("_") or attr in methods:
            raise ValueError(f"tool {tool.name!r} cannot be a TRL tool method (name clash)")
        methods[attr] = _method(tool)
    doc = f"TRL environment with the tools {', '.join(t.name for t in tools)}."
    return type(name, (TRLEnvironmentBase,), {"__doc__": doc, **methods})


def _probe_tools(
    env: str | Callable[[], gym.Env[str, str]], env_kwargs: dict[str, Any], task: str | None
) -> tuple[list[Tool], list[str]]:
    """The env's tools (after a reset on ``task`` when given) and its task ids."""
    made = _build(env, env_kwargs)
    try:
        base = text_env_of(made)
        tasks = [str(t) for t in base.task_ids()]
        made.reset(seed=0, options={"task_id": task if task is not None else tasks[0]})
        return list(base.tools()), tasks
    finally:
        made.close()


def environment_factory(
    env: str | Callable[[], gym.Env[str, str]],
    *,
    tools: str = "auto",
    reward: RewardMode = "outcome",
    step_weight: float | None = None,
    **env_kwargs: Any,
) -> Callable[[], TRLEnvironmentBase]:
    """The zero-argument callable for ``GRPOTrainer(environment_factory=...)``.

    ``env`` is an id (with ``env_kwargs`` for ``gym.make``) or a factory building a fresh
    (wrapped) env; TRL calls the result once per concurrent rollout. ``tools``: ``"env"`` (the
    env's typed tools, one method each), ``"act"`` (:class:`TRLEnvironment`'s generic tool) or
    ``"auto"`` (the default: the env's tools when it declares any, else ``act``). An env whose
    tools depend on the task (BFCL) needs :func:`environment_factories`.
    """
    if tools not in (*LAYOUTS, "auto"):
        raise ValueError(f"tools must be one of {(*LAYOUTS, 'auto')}, got {tools!r}")
    if not isinstance(env, str) and env_kwargs:
        raise ValueError("env_kwargs only apply when env is an id")
    trl_reward(reward, step_weight)  # a bad reward fails here, not in TRL's rollout
    cls: type[TRLEnvironmentBase] = TRLEnvironment
    declared, tasks = _probe_tools(env, env_kwargs, None) if tools != "act" else ([], [])
    if tools == "auto":
        tools = "env" if declared else "act"
    if tools == "env":
        if len(tasks) > 1:
            other, _ = _probe_tools(env, env_kwargs, tasks[-1])
            if tool_set_key(other) != tool_set_key(declared):
                raise ValueError(
                    "this env's tools depend on the task (BFCL's functions): use "
                    "environment_factories(env, tasks) and grpo_rows(..., environments=...)"
                )
        cls = trl_environment_class(declared)

    def make() -> TRLEnvironmentBase:
        return cls(env, reward=reward, step_weight=step_weight, **env_kwargs)

    return make


def environment_factories(
    env: str | Callable[[], gym.Env[str, str]],
    tasks: Sequence[str],
    *,
    reward: RewardMode = "outcome",
    step_weight: float | None = None,
    **env_kwargs: Any,
) -> tuple[dict[str, Callable[[], TRLEnvironmentBase]], dict[str, str]]:
    """TRL's ``dict`` form for an env whose tools depend on the task (BFCL's functions).

    Returns ``(factories, environment_of)``: one factory per distinct tool set (its class has
    those tools as typed methods; TRL shows a row only its environment's tools) and, per task,
    the name of its environment: give it to :func:`grpo_rows` (``environments=``), which
    writes the ``environment`` column TRL routes each row by. Tasks whose tools change during
    an episode (BFCL's ``miss_func`` entries release held-out functions) get the tools of
    their first user turn.
    """
    if not isinstance(env, str) and env_kwargs:
        raise ValueError("env_kwargs only apply when env is an id")
    trl_reward(reward, step_weight)
    classes: dict[str, type[TRLEnvironmentBase]] = {}
    environment_of: dict[str, str] = {}
    for task in tasks:
        declared, _ = _probe_tools(env, env_kwargs, str(task))
        key = tool_set_key(declared)
        if key not in classes:
            classes[key] = trl_environment_class(declared, f"TRLEnvironment_{key}")
        environment_of[str(task)] = key
    factories: dict[str, Callable[[], TRLEnvironmentBase]] = {}
    for key, cls in classes.items():

        def make(cls: type[TRLEnvironmentBase] = cls) -> TRLEnvironmentBase:
            return cls(env, reward=reward, step_weight=step_weight, **env_kwargs)

        factories[key] = make
    return factories, environment_of


def row_system_prompt(env: str | gym.Env[str, str], tools: str = "act", **env_kwargs: Any) -> str:
    """The system message of GRPO rows in a tool layout: with ``tools="env"`` the env's
    ``tool_system_prompt()`` (what the harness's tool-calling policies are told too, so
    training and evaluation prompt alike), with ``tools="act"`` its ``system_prompt()`` plus
    :data:`TOOL_HINT`. ``env``: a made env, or an id (made with ``env_kwargs`` and closed)."""
    if tools not in LAYOUTS:
        raise ValueError(f"tools must be one of {LAYOUTS}, got {tools!r}")
    made = make_env(env, env_kwargs) if isinstance(env, str) else env
    try:
        base = text_env_of(made)
        if tools == "env":
            return base.tool_system_prompt()
        system = base.system_prompt()
        return f"{system}\n\n{TOOL_HINT}" if system else TOOL_HINT
    finally:
        if isinstance(env, str):
            made.close()


def grpo_rows(
    env: str | gym.Env[str, str],
    tasks: Sequence[str],
    *,
    seeds: Sequence[int] | None = None,
    budgets: Sequence[int | None] | None = None,
    system_prompt: str | None = None,
    tools: str = "act",
    environments: Mapping[str, str] | None = None,
    **env_kwargs: Any,
) -> list[dict[str, Any]]:
    """Dataset rows for GRPO: one per task, each with a chat ``prompt`` and the reset columns.

    The prompt is a system message and an empty user message (TRL appends the first
    observation, returned by ``reset``, to it). The system message: with ``tools="env"`` the
    env's ``tool_system_prompt()`` (what the harness's tool-calling policies are told too, so
    training and evaluation prompt alike), with ``tools="act"`` its ``system_prompt()`` plus
    :data:`TOOL_HINT`; ``system_prompt`` overrides either. ``seeds`` default to ``0..n-1``;
    ``budgets`` fills a per-row ``max_turns`` column (``None`` entries: the env's default);
    ``environments`` (task -> name, from :func:`environment_factories`) fills TRL's
    ``environment`` column. ``env_kwargs`` go to ``gym.make`` when ``env`` is an id (made
    only when ``system_prompt`` is not given).
    """
    if tools not in LAYOUTS:
        raise ValueError(f"tools must be one of {LAYOUTS}, got {tools!r}")
    system = (
        system_prompt if system_prompt is not None else row_system_prompt(env, tools, **env_kwargs)
    )
    seeds = list(range(len(tasks))) if seeds is None else list(seeds)
    per_row = [None] * len(tasks) if budgets is None else list(budgets)
    if len(seeds) != len(tasks) or len(per_row) != len(tasks):
        raise ValueError("seeds and budgets need one entry per task")
    rows = []
    for task_id, seed, budget in zip(tasks, seeds, per_row):
        row: dict[str, Any] = {
            "prompt": [
                {"role": "system", "content": system},
                {"role": "user", "content": ""},
            ],
            "task_id": str(task_id),
            "seed": int(seed),
        }
        if budgets is not None:
            row["max_turns"] = None if budget is None else int(budget)
        if environments is not None:
            row["environment"] = environments[str(task_id)]
        rows.append(row)
    return rows


def grpo_dataset(env: str | gym.Env[str, str], tasks: Sequence[str], **kwargs: Any) -> Any:
    """:func:`grpo_rows` as a ``datasets.Dataset`` (what ``GRPOTrainer`` takes)."""
    from datasets import Dataset

    return Dataset.from_list(grpo_rows(env, tasks, **kwargs))
