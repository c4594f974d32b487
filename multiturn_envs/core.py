"""The env contract every MT/* environment implements: :class:`TextEnv`.

The base class owns everything that must behave identically across envs, so that each env only
writes its task logic:

* the turn budget (``max_turns``) and whether it is announced in observations. One mechanism,
  owned by the env (Minigrid's ``max_steps`` pattern); envs are registered with
  ``max_episode_steps=None`` so Gymnasium's ``TimeLimit`` never competes with it. The budget of
  an episode is decided at ``reset``, and only there: the reset options ``max_turns`` and
  ``budget_mode`` name it, else the constructor's arguments do. Nothing else writes it (the
  budget wrappers pass reset options, never reach in); see :meth:`TextEnv.reset` for the
  precedence;
* ``terminated`` (success or a real terminal state) versus ``truncated`` (budget spent), as
  Python bools;
* the ``info`` keys of the contract (``task_id``, ``turn``, ``turns_left``, ``success``,
  ``step_score``, ``parse_error``, ...);
* the conversation history (:meth:`TextEnv.messages`, or the copy-free
  :meth:`TextEnv.message_view`) that LLM policies are prompted with;
* exact snapshots (:meth:`TextEnv.get_state` / :meth:`TextEnv.set_state`), including the
  env's random generator, so that many actions can be tried from one state;
* guards: stepping before ``reset`` or after the episode ended raises a clear error; a reply
  longer than :attr:`TextEnv.max_action_chars` is refused before the env parses it (a turn
  spent, a clear observation); the history keeps at most :attr:`TextEnv.max_history_chars`
  characters (``docs/security.md``);
* typed tools (:meth:`TextEnv.tools`): an env declares its actions as functions once; a tool
  call (:mod:`multiturn_envs.tools`) is then an action like any text action, read by
  :meth:`TextEnv.read_tool_calls` without guessing;
* an async API (:meth:`TextEnv.areset`, :meth:`TextEnv.astep`, :meth:`TextEnv.aclose`): envs
  that wait on I/O (``blocking_io``: containers) do it in a worker thread, others run inline;
  either way one call at a time per env, in arrival order, a cancelled step completing before
  the next call starts (:mod:`multiturn_envs.step_gate`).

A subclass implements :meth:`TextEnv.task_ids`, :meth:`TextEnv._load_task`,
:meth:`TextEnv._step`, :meth:`TextEnv._get_state`, :meth:`TextEnv._set_state`, and the oracle
hooks :meth:`TextEnv.expert_action` and :meth:`TextEnv.error_action`.
"""

from __future__ import annotations

import copy
import hashlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from multiturn_envs.errors import EnvBusy, EpisodeOver
from multiturn_envs.spaces import UnicodeText
from multiturn_envs.step_gate import StepGate
from multiturn_envs.tools import (
    Action,
    Tool,
    ToolCall,
    ToolCallError,
    action_text,
    is_tool_call_text,
    read_tool_calls,
)

BudgetMode = Literal["hidden", "announced"]
BUDGET_MODES: tuple[str, ...] = ("hidden", "announced")
TURN_BUDGET = "turn_budget"
"""``info["truncation_reason"]`` of an episode whose turn budget is spent."""
BUDGET_OPTIONS: tuple[str, ...] = ("max_turns", "budget_mode")
"""The ``reset`` options that name the episode's budget (every :class:`TextEnv` reads them)."""
TOOL_TURNS_HINT = (
    "Take each turn by calling one of the tools: its result is the environment's answer. "
    "A reply without a tool call ends the episode."
)
"""How turns work for an agent given the env's tools (``reply_without_call == "stop"``)."""
ReplyWithoutCall = Literal["stop", "action"]
"""What a reply without a tool call is in a tool-calling episode (``reply_without_call``)."""


def check_budget(max_turns: Any, budget_mode: Any = "hidden") -> tuple[int | None, str]:
    """``(max_turns, budget_mode)`` checked and normalised, or a ``ValueError`` naming the bad one.

    Pure: wrappers validate their arguments with it at construction without touching any env.
    """
    if max_turns is not None and (
        not isinstance(max_turns, int | np.integer) or isinstance(max_turns, bool) or max_turns < 1
    ):
        raise ValueError(f"max_turns must be a positive int or None, got {max_turns!r}")
    if budget_mode not in BUDGET_MODES:
        raise ValueError(f"budget_mode must be one of {BUDGET_MODES}, got {budget_mode!r}")
    if budget_mode == "announced" and max_turns is None:
        raise ValueError("an announced budget needs max_turns")
    return (None if max_turns is None else int(max_turns)), str(budget_mode)


MAX_ACTION_CHARS = 1_000_000
"""Default :attr:`TextEnv.max_action_chars`: a megabyte of degenerate text is refused unread."""
MAX_HISTORY_CHARS = 32_000_000
"""Default :attr:`TextEnv.max_history_chars` (a budgeted episode never comes near it)."""


@dataclass
class StepOutcome:
    """What an env's ``_step`` returns; the base class turns it into Gymnasium's 5-tuple.

    Attributes:
        observation: the env's feedback for this action (the budget note is added by the base).
        reward: the env's reward for this step.
        terminated: success or a real terminal state (a hole, the last user turn, ...).
        success: whether the task is solved *now*.
        step_score: the oracle's score of this action at the state it was taken in, in [0, 1].
        parse_error: ``None`` when the action was understood, else the message shown to the agent.
        info: env-specific extra ``info`` entries (must be deterministic).
    """

    observation: str
    reward: float
    terminated: bool
    success: bool
    step_score: float
    parse_error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


class TextEnv(gym.Env[str, str]):
    """Base class of a multi-turn text environment with a turn budget and oracle hooks.

    Args:
        max_turns: the turn budget of an episode whose ``reset`` names none (``None``: no
            budget). Every call to ``step`` is one turn, unparseable replies included.
        budget_mode: ``"hidden"`` (observations never mention the budget, so one run at the
            largest budget gives the whole Pass@(K,T) surface) or ``"announced"`` (each
            observation ends with the turns left); likewise the default of ``reset``.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012
    #: Replies longer than this are refused before ``_step`` parses them: the turn is spent and
    #: the observation says why (:meth:`_refuse`). Set it on the instance to change it.
    max_action_chars: int = MAX_ACTION_CHARS
    #: The history (:meth:`messages`) keeps at most this many characters: past it, the oldest
    #: turns after the first observation are dropped (counted in :attr:`dropped_messages`).
    max_history_chars: int = MAX_HISTORY_CHARS
    #: ``reset`` options an env understands besides ``task_id``; others are dropped with a warning
    #: (PettingZoo's ``api_test`` passes made-up options, so unknown keys cannot be errors).
    reset_options: ClassVar[frozenset[str]] = frozenset()
    #: Tool calls one reply may hold (one action per turn: 1; BFCL: a turn's parallel calls).
    max_tool_calls: int = 1
    #: Why an instance cannot be pickled (``None``: it can, after ``reset`` too). An env that
    #: holds what no pickle can carry (a database connection, a container) says why, and
    #: ``pickle`` refuses it with a ``TypeError`` naming the way to branch an episode instead:
    #: another instance and ``set_state(get_state())`` (docs/env-contract.md).
    not_picklable: ClassVar[str | None] = None
    #: Why an instance cannot be deep-copied (``None``: it can); ``copy.deepcopy`` refuses it as
    #: ``pickle`` does.
    not_copyable: ClassVar[str | None] = None
    #: In a tool-calling episode, what a reply without any tool call is: ``"stop"`` (the agent
    #: is done: the episode ends there, not a turn; TRL ends its rollout there too) or
    #: ``"action"`` (a text action, e.g. BFCL's message to the user that ends a user turn).
    #: The one rule the harness and training share (:func:`multiturn_envs.tools` docs).
    reply_without_call: ReplyWithoutCall = "stop"
    #: Whether a tool call's name and arguments are checked against :meth:`tools` when it is
    #: read (False: structure only, for envs whose own checker grades calls, as BFCL's does).
    check_tool_arguments: bool = True
    #: Whether :meth:`tools` may change within an episode (BFCL releases held-out functions);
    #: when False, a client may read them once per reset.
    tools_change_in_episode: bool = False
    #: Whether ``reset``/``step`` wait on I/O (containers, processes): :meth:`areset` and
    #: :meth:`astep` then run them in a worker thread, so an event loop never waits on them.
    blocking_io: ClassVar[bool] = False

    def __init__(
        self,
        max_turns: int | None = None,
        budget_mode: BudgetMode = "hidden",
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self._default_budget = check_budget(max_turns, budget_mode)
        self._max_turns, self._budget_mode = self._default_budget
        self._turn = 0
        self._prefix_turns = 0
        self._needs_reset = True
        self._done = False
        self._success = False
        self._task_id: str | None = None
        self._history: list[dict[str, str]] = []
        self._history_chars = 0
        self.dropped_messages = 0
        self._last_observation = ""
        self._step_gate = StepGate()

    # ------------------------------------------------------------------ to implement
    def task_ids(self) -> Sequence[str]:
        """The ids of the tasks this env can load (``reset(options={"task_id": ...})``)."""
        raise NotImplementedError

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        """Set up the task ``task_id`` and return the first observation."""
        raise NotImplementedError

    def _step(self, action: str) -> StepOutcome:
        """Apply one action. ``self.turns_left`` still counts this action (it is ``>= 1``)."""
        raise NotImplementedError

    def _get_state(self) -> Any:
        """The env-specific part of an exact snapshot (deep-copyable)."""
        raise NotImplementedError

    def _set_state(self, state: Any) -> None:
        """Restore what :meth:`_get_state` returned."""
        raise NotImplementedError

    def expert_action(self) -> str:
        """An optimal action at the current state (the oracle's choice)."""
        raise NotImplementedError

    def error_action(self, rng: np.random.Generator) -> str:
        """A plausible wrong action that does not end the episode, drawn from ``rng``."""
        raise NotImplementedError

    def valid_actions(self) -> Sequence[str] | None:
        """The env's finite set of well-formed actions, or ``None`` when it has none."""
        return None

    def system_prompt(self) -> str:
        """Standing instructions for an LLM agent (the first observation repeats what matters)."""
        return ""

    def tool_system_prompt(self) -> str:
        """Standing instructions for an agent given the env's tools (a tool-calling policy and
        TRL's typed tools read this instead of :meth:`system_prompt`, which describes the text
        form). Default: the system prompt plus :data:`TOOL_TURNS_HINT` (``"stop"`` envs)."""
        own = self.system_prompt()
        if self.reply_without_call != "stop":
            return own
        return f"{own}\n\n{TOOL_TURNS_HINT}" if own else TOOL_TURNS_HINT

    def tools(self) -> Sequence[Tool]:
        """The env's actions as typed tools (OpenAI function format), for the current task.

        Declared once here; a call of one (:meth:`read_tool_calls`) is an action like any text
        action. ``()``: the env takes text only. Envs whose tools depend on the task (BFCL's
        functions) return the current task's (``()`` before the first ``reset``).
        """
        return ()

    def as_tool_call(self, action: str) -> ToolCall | None:
        """The tool call that does what the text ``action`` does, or ``None`` (no such call, or
        the env cannot say). Used to write training data in the tool layout."""
        return None

    def _close(self) -> None:
        """Release heavy resources (containers, databases). Called at most once per open."""

    def _refuse(self, message: str) -> StepOutcome:
        """The outcome of a reply refused unread (too long): a parse error that changes nothing.

        Envs whose parse errors carry more (``info`` extras, a reward on the last turn) override
        it to give their own parse-error outcome.
        """
        return StepOutcome(message, 0.0, False, self._success, 0.0, message)

    # ------------------------------------------------------------------ oracle hooks
    def score_action(self, action: str) -> float:
        """The oracle's score of ``action`` at the current state, leaving the state unchanged.

        The default applies the action and restores a snapshot; envs with a cheaper exact
        oracle (FrozenLake's dynamic programming) override it.
        """
        self._require_live()
        snapshot = self.get_state()
        try:
            return float(self._apply(action).step_score)
        finally:
            self.set_state(snapshot)

    def random_action(self, rng: np.random.Generator) -> str:
        """A uniformly random well-formed action (or random text when the env has no finite set)."""
        actions = self.valid_actions()
        if actions:
            return actions[int(rng.integers(len(actions)))]
        sampler = UnicodeText(seed=int(rng.integers(2**32)))
        return sampler.sample()

    def state_key(self) -> str:
        """A stable id of the current state: equal states give equal keys (GiGPO anchors)."""
        digest = hashlib.sha1(self._last_observation.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()[:16]

    # ------------------------------------------------------------------ tool calls
    def read_tool_calls(self, action: str) -> list[ToolCall] | ToolCallError | None:
        """The tool calls ``action`` makes, checked against :meth:`tools`; a
        :class:`~multiturn_envs.tools.ToolCallError` (its text is the observation to show) when
        the call is malformed; ``None`` when ``action`` is not a tool call (or the env has no
        tools): then it is the env's text form. Envs call this first in ``_step``."""
        if not is_tool_call_text(action):
            return None
        tools = self.tools()
        if not tools:
            return None
        try:
            return read_tool_calls(
                action, tools, max_calls=self.max_tool_calls, strict=self.check_tool_arguments
            )
        except ToolCallError as exc:
            return ToolCallError(f"Tool call error: {exc}.")

    # ------------------------------------------------------------------ async
    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """:meth:`reset` without blocking an event loop (see :attr:`blocking_io`; for a wrapped
        env, :func:`areset_env`)."""
        return await areset_env(self, seed=seed, options=options)

    async def astep(self, action: Action) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """:meth:`step` without blocking an event loop (see :attr:`blocking_io`; for a wrapped
        env, :func:`astep_env`). Calls on one env run one at a time, in the order they came;
        a cancelled call's step completes before the next starts (:mod:`.step_gate`)."""
        return await astep_env(self, action)

    async def aclose(self) -> None:
        """:meth:`close` once the calls before it are done (for a wrapped env,
        :func:`aclose_env`)."""
        await aclose_env(self)

    # ------------------------------------------------------------------ budget
    @property
    def max_turns(self) -> int | None:
        """The turn budget of the current episode (before the first ``reset``: the default)."""
        return self._max_turns

    @property
    def budget_mode(self) -> str:
        """``"hidden"`` or ``"announced"``: the current episode's (before ``reset``: the
        default)."""
        return self._budget_mode

    @property
    def default_budget(self) -> tuple[int | None, str]:
        """``(max_turns, budget_mode)`` of an episode whose ``reset`` names no budget."""
        return self._default_budget

    def set_turn_budget(self, max_turns: int | None, budget_mode: str = "hidden") -> None:
        """Deprecated: change the default budget (the constructor's ``max_turns``/``budget_mode``).

        An episode's budget is named by ``reset(options={"max_turns": ..., "budget_mode":
        ...})`` or by a budget wrapper (which passes those options); this changes only what
        later resets fall back on.
        """
        warnings.warn(
            "TextEnv.set_turn_budget is deprecated: pass max_turns/budget_mode to the "
            "constructor, in reset(options=...), or wrap the env in TurnBudget",
            DeprecationWarning,
            stacklevel=2,
        )
        self._default_budget = check_budget(max_turns, budget_mode)
        if self._needs_reset:
            self._max_turns, self._budget_mode = self._default_budget

    @property
    def turn(self) -> int:
        """Turns the agent has taken in this episode (injected prefix turns excluded)."""
        return self._turn

    @property
    def turns_left(self) -> int | None:
        """Turns the agent may still take (``None`` without a budget)."""
        if self.max_turns is None:
            return None
        return max(self.max_turns - self._turn, 0)

    @property
    def task_id(self) -> str | None:
        return self._task_id

    @property
    def done(self) -> bool:
        return self._done

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode; return its first observation and ``info``.

        Options every env reads: ``task_id`` (default: drawn from ``np_random``), and the
        episode's budget, ``max_turns`` and ``budget_mode``. The budget is decided here, once
        per episode, by the first that names it (each key on its own):

        1. the ``options`` of this call: what the caller of the episode asks for (a dataset
           row, a served client's reset, the harness's run through its ``TurnBudget``);
        2. the budget wrappers, outermost first (each passes its budget as these options
           unless an outer layer already did);
        3. the constructor's ``max_turns`` and ``budget_mode``.

        The budget holds for this episode only; the next ``reset`` decides again.

        Raises :class:`~multiturn_envs.errors.EnvBusy` while an async call of this env
        (:meth:`areset`, :meth:`astep`) holds it.
        """
        self._check_free()
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        max_turns, budget_mode = check_budget(
            options.pop("max_turns", self._default_budget[0]),
            options.pop("budget_mode", self._default_budget[1]),
        )
        unknown = sorted(set(options) - self.reset_options)
        if unknown:
            accepted = ", ".join(["task_id", *BUDGET_OPTIONS, *sorted(self.reset_options)])
            warnings.warn(
                f"{type(self).__name__}.reset ignores unknown options {unknown} "
                f"(it takes {accepted})",
                stacklevel=2,
            )
            for key in unknown:
                del options[key]
        if task_id is None:
            ids = self.task_ids()
            if not ids:
                raise ValueError(f"{type(self).__name__} has no tasks to load")
            task_id = ids[int(self.np_random.integers(len(ids)))]
        task_id = str(task_id)
        self._max_turns, self._budget_mode = max_turns, budget_mode
        observation = self._load_task(task_id, options)
        self._task_id = task_id
        self._turn = 0
        self._prefix_turns = 0
        self._needs_reset = False
        self._done = False
        self._success = False
        observation = self._with_budget_note(observation)
        self._history = [{"role": "user", "content": observation}]
        self._history_chars = len(observation)
        self.dropped_messages = 0
        self._last_observation = observation
        return observation, self._info(step_score=None, parse_error=None, extra={})

    def step(self, action: Action) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One turn: ``action`` is text, or tool calls (recorded as their canonical text).

        Raises :class:`~multiturn_envs.errors.EnvBusy` while an async call of this env holds it.
        """
        if self._step_gate.held:  # the hot path pays one attribute read
            self._check_free()
        self._require_live()
        if not isinstance(action, str):
            action = action_text(action)
        # the reply cap of _apply, inlined: this is every env's hot path
        fits = len(action) <= self.max_action_chars
        outcome = self._step(action) if fits else self._apply(action)
        self._turn += 1
        self._success = bool(outcome.success)
        terminated = bool(outcome.terminated)
        truncated = not terminated and self.max_turns is not None and self._turn >= self.max_turns
        self._done = terminated or truncated
        observation = self._with_budget_note(outcome.observation)
        self._record(action, observation)
        info = self._info(
            step_score=float(outcome.step_score),
            parse_error=outcome.parse_error,
            extra=outcome.info,
        )
        info["truncation_reason"] = TURN_BUDGET if truncated else None
        return observation, float(outcome.reward), terminated, bool(truncated), info

    def _refuse_copy(self, what: str, why: str) -> TypeError:
        name = self.spec.id if self.spec is not None else type(self).__name__
        return TypeError(
            f"{name} cannot be {what}: {why}. To branch an episode, make another instance "
            "and set_state(get_state()) on it (docs/env-contract.md)"
        )

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self.not_picklable is not None:
            raise self._refuse_copy("pickled", self.not_picklable)
        return super().__reduce_ex__(protocol)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """The default deep copy (every attribute deep-copied), or a clear refusal
        (:attr:`not_copyable`); it does not go through pickling, so an env that refuses
        pickling (:attr:`not_picklable`) may still be deep-copied."""
        if self.not_copyable is not None:
            raise self._refuse_copy("deep-copied", self.not_copyable)
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        getstate = getattr(self, "__getstate__", None)  # object's (3.11+): the __dict__
        state = copy.deepcopy(getstate() if getstate is not None else self.__dict__, memo)
        if hasattr(new, "__setstate__"):
            new.__setstate__(state)
        elif state:
            new.__dict__.update(state)
        return new

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        return None

    def close(self) -> None:
        """Release the env's resources (once). A step of an async call still running in its
        worker thread (a cancelled ``astep``'s) is waited for first."""
        gate = getattr(self, "_step_gate", None)
        if gate is not None:
            gate.wait_running()
        if not getattr(self, "_closed", False):
            self._closed = True
            self._close()
        super().close()

    # ------------------------------------------------------------------ for wrappers
    def play_prefix(self, action: Action) -> StepOutcome:
        """Apply ``action`` as part of the history handed to the agent (error injection).

        The turn is recorded in :meth:`messages` but does not count against the budget. Raises
        ``ValueError`` when the action ends the episode: a prefix must leave a live state.
        """
        self._require_live()
        if not isinstance(action, str):
            action = action_text(action)
        snapshot = self.get_state()
        outcome = self._apply(action)
        if outcome.terminated:
            self.set_state(snapshot)
            raise ValueError(f"prefix action {action!r:.80} ends the episode of {self._task_id}")
        self._prefix_turns += 1
        self._success = bool(outcome.success)
        observation = self._with_budget_note(outcome.observation)
        self._record(action, observation)
        return outcome

    def current_observation(self) -> str:
        """The last observation the agent was shown."""
        return self._last_observation

    def current_info(self) -> dict[str, Any]:
        """The contract's ``info`` for the current state (no step score: no action was taken)."""
        return self._info(step_score=None, parse_error=None, extra={})

    # ------------------------------------------------------------------ history and snapshots
    def messages(self) -> list[dict[str, str]]:
        """The episode so far as chat messages: user (observation), assistant (action), ...

        A private copy the caller may change; :meth:`message_view` is the cheap shared one.
        """
        return [dict(m) for m in self._history]

    def message_view(self) -> list[dict[str, str]]:
        """The episode so far as chat messages, without copying them: a shallow view.

        A fresh list (the caller may reorder or extend it) of the env's own message dicts,
        which it never changes once appended (``step`` and ``play_prefix`` append new dicts
        and may drop the oldest past :attr:`max_history_chars`; ``reset`` and ``set_state``
        replace the whole history), so a view stays a valid
        picture of the turns it covers. Callers must not mutate the dicts. The harness hands
        this to policies each turn, where copying every message of every live episode cost
        ~5 % of a FrozenLake evaluation; :meth:`messages` is the private deep copy.
        """
        return list(self._history)

    def get_state(self) -> dict[str, Any]:
        """An exact, deep-copied snapshot: task, turn counters, history, RNG and env state."""
        return {
            "task_id": self._task_id,
            "turn": self._turn,
            "prefix_turns": self._prefix_turns,
            "needs_reset": self._needs_reset,
            "done": self._done,
            "success": self._success,
            "max_turns": self.max_turns,
            "budget_mode": self.budget_mode,
            "history": copy.deepcopy(self._history),
            "last_observation": self._last_observation,
            "rng": copy.deepcopy(self.np_random.bit_generator.state),
            "env": copy.deepcopy(self._get_state()) if not self._needs_reset else None,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a snapshot taken by :meth:`get_state` (on this env or an identical one)."""
        self._restore_base(state)
        if state["env"] is not None:
            self._set_state(copy.deepcopy(state["env"]))

    def _restore_base(self, state: dict[str, Any]) -> None:
        """The base class's part of a snapshot: task, counters, history and the RNG."""
        self._task_id = state["task_id"]
        self._turn = state["turn"]
        self._prefix_turns = state["prefix_turns"]
        self._needs_reset = state["needs_reset"]
        self._done = state["done"]
        self._success = state["success"]
        self._max_turns = state["max_turns"]
        self._budget_mode = state["budget_mode"]
        self._history = copy.deepcopy(state["history"])
        self._history_chars = sum(len(m["content"]) for m in self._history)
        self._last_observation = state["last_observation"]
        self.np_random.bit_generator.state = copy.deepcopy(state["rng"])

    # ------------------------------------------------------------------ internals
    def _apply(self, action: str) -> StepOutcome:
        """``_step(action)``, unless the action is too long to read (:attr:`max_action_chars`)."""
        if len(action) > self.max_action_chars:
            return self._refuse(
                f"The reply is {len(action):,} characters long; this environment reads replies "
                f"of at most {self.max_action_chars:,} characters. Nothing was done."
            )
        return self._step(action)

    def _record(self, action: str, observation: str) -> None:
        """Append one turn to the history, keeping it within :attr:`max_history_chars`.

        Past the bound, the oldest turns after the first observation (the task) are dropped
        until a quarter of the bound is free again, so trimming costs O(1) per turn on average.
        """
        history = self._history
        history.append({"role": "assistant", "content": action})
        history.append({"role": "user", "content": observation})
        self._last_observation = observation
        self._history_chars += len(action) + len(observation)
        if self._history_chars > self.max_history_chars:
            self._trim_history()

    def _trim_history(self) -> None:
        target = self.max_history_chars * 3 // 4
        drop = 0
        chars = self._history_chars
        while chars > target and 1 + drop + 2 < len(self._history):  # keep the last turn
            chars -= len(self._history[1 + drop]["content"]) + len(
                self._history[2 + drop]["content"]
            )
            drop += 2
        del self._history[1 : 1 + drop]
        self._history_chars = chars
        self.dropped_messages += drop

    def _check_free(self) -> None:
        if self._step_gate.busy_for_caller():
            raise EnvBusy(
                f"{type(self).__name__}: an async call of this env (areset/astep) is running or "
                "queued; a cancelled astep's step completes in its worker thread before the "
                "next call. Await the async calls instead of calling reset/step meanwhile"
            )

    def _require_live(self) -> None:
        if self._needs_reset:
            raise ResetNeeded("call reset() before step()")
        if self._done:
            raise EpisodeOver("the episode has ended (terminated or truncated); call reset()")

    def _with_budget_note(self, observation: str) -> str:
        if self.budget_mode != "announced" or self.max_turns is None:
            return observation
        left = self.turns_left
        return f"{observation}\n\n[Turns left: {left} of {self.max_turns}]"

    def _info(
        self, *, step_score: float | None, parse_error: str | None, extra: dict[str, Any]
    ) -> dict[str, Any]:
        info: dict[str, Any] = {
            "task_id": self._task_id,
            "turn": self._turn,
            "turns_left": self.turns_left,
            "max_turns": self.max_turns,
            "budget_mode": self.budget_mode,
            "success": self._success,
            "step_score": step_score,
            "parse_error": parse_error is not None,
            "error_message": parse_error,
            "prefix_turns": self._prefix_turns,
            "state_key": self.state_key(),
        }
        info.update(copy.deepcopy(extra))
        return info


def blocks_on_io(env: gym.Env[Any, Any]) -> bool:
    """Whether ``env`` (wrapped or not) waits on I/O in ``reset``/``step``: its base env's
    ``blocking_io`` (containers, processes). Such envs are stepped in a worker thread by
    :func:`astep_env`; others inline."""
    return bool(getattr(env.unwrapped, "blocking_io", False))


def gate_of(env: gym.Env[Any, Any]) -> StepGate:
    """The :class:`~multiturn_envs.step_gate.StepGate` of ``env``'s base env (every wrapper
    stack over one env shares it); made on first use for an env that is not a ``TextEnv``."""
    base = env.unwrapped
    gate = getattr(base, "_step_gate", None)
    if not isinstance(gate, StepGate):
        gate = StepGate()
        base._step_gate = gate  # type: ignore[attr-defined]
    return gate


async def areset_env(
    env: gym.Env[str, str], *, seed: int | None = None, options: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """``env.reset`` for an event loop: in a worker thread when the env waits on I/O (the whole
    wrapper stack runs there, so wrappers see one reset), inline otherwise; after the calls
    before it on this env (:mod:`~multiturn_envs.step_gate`)."""
    gate = gate_of(env)
    await gate.acquire()
    if blocks_on_io(env):
        return await gate.run_in_thread(env.reset, seed=seed, options=options)
    gate.enter()
    try:
        return env.reset(seed=seed, options=options)
    finally:
        gate.release()


async def astep_env(
    env: gym.Env[str, str], action: Action
) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
    """``env.step`` for an event loop: in a worker thread when the env waits on I/O (a Docker
    sandbox run, a shell command), inline otherwise (a thread hop would cost more than a
    pure-Python step).

    One call at a time per env, in the order they came (:mod:`~multiturn_envs.step_gate`):
    ``asyncio.gather`` of several steps runs them one after another; a call cancelled while
    it waits never runs; one cancelled while its step runs in the worker thread (a timeout of
    ``asyncio.wait_for``) keeps the env until that step returns, so its turn is taken and
    counted before the next call starts."""
    text = action_text(action)
    gate = gate_of(env)
    await gate.acquire()
    if blocks_on_io(env):
        return await gate.run_in_thread(env.step, text)
    gate.enter()
    try:
        return env.step(text)
    finally:
        gate.release()


async def aclose_env(env: gym.Env[Any, Any]) -> None:
    """``env.close`` for an event loop, once every call queued before it on this env is done
    (a cancelled step's thread included). Always in a worker thread: closing may wait on I/O
    even for an env whose steps do not (a database file, a served env's socket), and it
    happens once per env."""
    gate = gate_of(env)
    await gate.acquire()
    await gate.run_in_thread(env.close)
