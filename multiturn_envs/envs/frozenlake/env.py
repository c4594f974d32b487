"""``MT/FrozenLake-v0``: Gymnasium's FrozenLake-v1 as a multi-turn text env with an exact oracle."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from multiturn_envs.core import TOOL_TURNS_HINT, BudgetMode, StepOutcome, TextEnv
from multiturn_envs.envs.frozenlake.dynamics import ACTION_NAMES, LakeDynamics
from multiturn_envs.envs.frozenlake.maps import (
    LakeMap,
    parse_task_id,
    random_task_id,
    validate_task_id,
)
from multiturn_envs.envs.frozenlake.oracle import LakeOracle
from multiturn_envs.envs.frozenlake.parsing import MOVE_WORDS, PARSE_HELP, ParsedMove, parse_move
from multiturn_envs.envs.frozenlake.render import (
    LakeRenderer,
    check_glyph_keys,
    check_observation,
    move_feedback,
)
from multiturn_envs.tools import Tool, ToolCall

DEFAULT_TASKS: tuple[str, ...] = tuple(random_task_id(4, 0.8, seed) for seed in range(100))
_MAX_CACHED_TASKS = 256
GlyphItems = tuple[tuple[str, str], ...] | None

MOVE_TOOL = Tool(
    "move",
    "Take one step on the lake: Left, Down, Right or Up. On slippery ice the step may slide "
    "to a perpendicular direction. Returns what happened and the lake after the step.",
    {
        "type": "object",
        "properties": {
            "direction": {
                "type": "string",
                "enum": list(ACTION_NAMES),
                "description": "the direction to step in",
            }
        },
        "required": ["direction"],
    },
)
"""FrozenLake's one action as a typed tool."""


class _ScalarInfo(dict):  # type: ignore[type-arg]
    """Step ``info`` extras holding only immutable scalars, so a deep copy is a shallow one.

    The base class deep-copies every extra ``info`` dict (so no two infos share an object);
    for three scalars the generic ``copy.deepcopy`` costs more than the whole move. Returning
    a plain ``dict`` copy is exact here and keeps the step faster than Gymnasium's.
    """

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return dict(self)


@dataclass(frozen=True, eq=False)
class _Task:
    """Everything derived from one map under one set of settings: immutable, shared.

    Built by :func:`build_task`, which memoises it per process, so every env instance with the
    same settings (the harness holds 64 of them) shares one copy instead of rebuilding ~5 ms
    of tables per instance. Sharing is safe because nothing here changes what it computes:
    the arrays of the dynamics and the oracle are read-only, and the memo tables (the
    oracle's per-horizon values, the renderer's blocks, :attr:`observations`) only ever gain
    entries that are a pure function of their key. The runner steps envs in threads when
    ``workers > 1``: two threads filling the same entry compute the same value and either
    store wins (a ``dict`` store is atomic under the GIL); the oracle guards the one
    structure that is replaced rather than filled (its finite-horizon table) with a lock.
    """

    key: tuple[str, bool, float, float, str, GlyphItems, str]
    lake: LakeMap
    dynamics: LakeDynamics
    oracle: LakeOracle
    renderer: LakeRenderer
    #: ``(cell, action, direction) -> (observation, event)`` of a move, filled lazily.
    observations: dict[tuple[int, int, int], tuple[str, str]] = field(default_factory=dict)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Task:
        return self  # immutable in meaning: a copied env shares it like a new one would

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return build_task, self.key  # pickled by its key, rebuilt (or found) on load


@functools.lru_cache(maxsize=_MAX_CACHED_TASKS)
def build_task(
    task_id: str,
    is_slippery: bool,
    success_rate: float,
    gamma: float,
    separator: str,
    glyph_items: GlyphItems,
    observation: str = "full",
) -> _Task:
    """The shared :class:`_Task` of ``task_id`` under these settings (memoised, bounded).

    A pure function of its arguments, so a process-wide memo is exact; it is bounded
    (``_MAX_CACHED_TASKS`` entries, least recently used dropped) so sweeping thousands of
    random maps does not grow memory without limit. :func:`clear_task_cache` empties it.
    """
    lake = parse_task_id(task_id)
    dynamics = LakeDynamics(lake.desc, is_slippery, success_rate)
    glyphs = dict(glyph_items) if glyph_items else None
    return _Task(
        (task_id, is_slippery, success_rate, gamma, separator, glyph_items, observation),
        lake,
        dynamics,
        LakeOracle(dynamics, gamma),
        LakeRenderer(lake.desc, separator, glyphs, observation),
    )


def clear_task_cache() -> None:
    """Forget every shared task (benchmarks measuring a cold start; tests)."""
    build_task.cache_clear()


class FrozenLakeTextEnv(TextEnv):
    """Cross a frozen lake from the start to the goal without falling into a hole, in text.

    ## Description
    The grid world of Gymnasium's ``FrozenLake-v1``: the same maps, the same transition table
    ``P`` and, for the same map, reset seed and moves, the same trajectory (one uniform draw
    from ``self.np_random`` at reset for the start cell and one per move, sampled as
    Gymnasium's ``categorical_sample`` does). Tasks are maps named by id: ``"4x4"``, ``"8x8"``,
    ``"random-s<size>-p<frozen prob>-n<seed>"`` or ``"map:SFFF/FHFH/FFFH/HFFG"``.

    ## Spaces
    Observation and action are ``str`` (:class:`multiturn_envs.spaces.UnicodeText`). The
    observation is last turn's feedback (moved, slipped, bumped into the edge, fell into a
    hole, reached the goal, or could not parse the reply), the grid in RAGEN glyphs, a legend
    and the position (row, column). The action is a reply naming one move (Left, Down, Right,
    Up), parsed tolerantly (:mod:`multiturn_envs.envs.frozenlake.parsing`), or a call of the
    tool ``move(direction)`` (:data:`MOVE_TOOL`, one call per turn).

    ## Rewards
    1.0 on reaching the goal, 0.0 otherwise (Gymnasium's default ``reward_schedule``).

    ## Episode End
    ``terminated`` on the goal (``success``) or a hole. ``truncated`` when the turn budget is
    spent. An unparseable reply spends a turn without moving and without a random draw.

    ## Arguments
    * ``max_turns``, ``budget_mode``, ``render_mode``: see :class:`multiturn_envs.core.TextEnv`.
    * ``tasks``: the task ids ``reset`` draws from when no ``task_id`` option is given
      (default: 100 random solvable 4x4 maps, frozen probability 0.8, seeds 0-99). Any valid id
      can be passed as ``options={"task_id": ...}`` whether listed or not.
    * ``is_slippery`` (default True) and ``success_rate`` (default 1/3): Gymnasium's slip model.
    * ``gamma`` (default 0.99): discount of the oracle's discounted Q (tie-breaks).
    * ``separator`` (default ``""``) and ``glyphs``: how the grid is drawn.
    * ``observation`` (default ``"full"``): ``"full"`` (feedback, grid, legend, position) or
      ``"compact"`` (the grid alone after each move, as RAGEN shows it; the first observation
      keeps the rules and gives the legend once; a parse error keeps its one-line reason).

    ## Turn Budget
    Owned by the base class: every reply is one turn, unparseable ones included.

    ## Oracle
    Exact dynamic programming (:mod:`multiturn_envs.envs.frozenlake.oracle`). ``step_score``
    and ``score_action`` are ``Q_h(s, a) / V_h(s)`` with ``h`` the turns left including the
    scored one (``Q_h`` = probability of reaching the goal within ``h`` turns), 1.0 when
    ``V_h(s) = 0``; the undiscounted reach probability without a budget; an unparseable reply
    scores ``V_{h-1}(s) / V_h(s)``. ``info["state_value"]`` is ``V_h(s)`` of the state the turn
    was taken from (0: the state was already lost, so every move scored 1.0; the process reward
    of :mod:`multiturn_envs.adapters.trl` gives such turns no credit). ``expert_action``
    maximises ``Q_h``; ``error_action`` is a strictly suboptimal move that cannot end the
    episode when one exists.

    ## Version History
    * v0: initial version (Gymnasium 1.x FrozenLake-v1 dynamics, success_rate semantics >= 1.2).
    """

    def __init__(
        self,
        max_turns: int | None = None,
        budget_mode: BudgetMode = "hidden",
        render_mode: str | None = None,
        tasks: Sequence[str] | None = None,
        is_slippery: bool = True,
        success_rate: float = 1.0 / 3.0,
        gamma: float = 0.99,
        separator: str = "",
        glyphs: Mapping[str, str] | None = None,
        observation: str = "full",
    ) -> None:
        super().__init__(max_turns=max_turns, budget_mode=budget_mode, render_mode=render_mode)
        check_observation(observation)
        if not 0.0 <= success_rate <= 1.0:
            raise ValueError(f"success_rate must be in [0, 1], got {success_rate}")
        if not 0.0 < gamma < 1.0:
            raise ValueError(f"gamma must be in (0, 1), got {gamma}")
        self.is_slippery = bool(is_slippery)
        self.success_rate = float(success_rate)
        self.gamma = float(gamma)
        self.separator = separator
        self.glyphs = dict(glyphs) if glyphs else None
        check_glyph_keys(self.glyphs)  # now, not at the first reset
        self.observation = observation
        self._tasks: tuple[str, ...] = DEFAULT_TASKS if tasks is None else tuple(tasks)
        if tasks is not None:  # the defaults are valid by construction (a runner makes 64 envs)
            for task_id in self._tasks:
                validate_task_id(task_id)
        self._glyph_items: GlyphItems = tuple(sorted(self.glyphs.items())) if self.glyphs else None
        self._task: _Task | None = None
        self._cell = 0
        self._event = "start"

    # ------------------------------------------------------------------ tasks
    def task_ids(self) -> Sequence[str]:
        return self._tasks

    def _task_for(self, task_id: str) -> _Task:
        return build_task(
            task_id,
            self.is_slippery,
            self.success_rate,
            self.gamma,
            self.separator,
            self._glyph_items,
            self.observation,
        )

    def _activate(self, task_id: str) -> _Task:
        task = self._task
        if task is None or task.key[0] != task_id:
            task = self._task = self._task_for(task_id)
        return task

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        task = self._activate(task_id)
        self._cell = task.dynamics.sample_start(self.np_random.random())
        self._event = "start"
        if task.renderer.compact:  # the legend once; no position line
            grid = task.renderer.block(self._cell)
            return f"{self._rules(task)}\n{task.renderer.legend}\n\n{grid}"
        row, col = divmod(self._cell, task.lake.ncol)
        return (
            f"{self._rules(task)}\n\nYou start at row {row}, column {col}.\n"
            f"{task.renderer.block(self._cell)}"
        )

    def _rules(self, task: _Task) -> str:
        lake = task.lake
        if self.is_slippery:
            slip = (1.0 - self.success_rate) / 2.0
            ice = (
                f"The ice is slippery: a move goes the way you intend with probability "
                f"{self.success_rate:.3g}, and slides to each of the two perpendicular "
                f"directions with probability {slip:.3g}."
            )
        else:
            ice = "The ice is not slippery: every move goes the way you intend."
        return (
            f"You are on a frozen lake of {lake.nrow} rows and {lake.ncol} columns. Reach the "
            f"goal without falling into a hole; moving off the edge leaves you in place. {ice} "
            f"Each turn, reply with one move: Left, Down, Right or Up."
        )

    def system_prompt(self) -> str:
        return (
            "You play FrozenLake. Each turn you see the lake as a grid and reply with one move: "
            "Left, Down, Right or Up, for example <answer>Right</answer>. Reach the goal "
            "without falling into a hole."
        )

    def tool_system_prompt(self) -> str:
        return (
            "You play FrozenLake. Each turn you see the lake as a grid and call the move tool "
            "with one direction: Left, Down, Right or Up. Reach the goal without falling into a "
            f"hole.\n\n{TOOL_TURNS_HINT}"
        )

    def tools(self) -> Sequence[Tool]:
        return (MOVE_TOOL,)

    def as_tool_call(self, action: str) -> ToolCall | None:
        move = parse_move(action).action
        return None if move is None else ToolCall("move", {"direction": ACTION_NAMES[move]})

    def _read(self, action: str) -> ParsedMove:
        """The move of a reply: a ``move`` tool call, else the text rules of
        :mod:`~multiturn_envs.envs.frozenlake.parsing`."""
        if "<tool_call>" not in action:  # text (the hot path): no tool-call reading at all
            return parse_move(action)
        calls = self.read_tool_calls(action)
        if calls is None:
            return parse_move(action)
        if isinstance(calls, list):
            return ParsedMove(MOVE_WORDS[str(calls[0].arguments["direction"]).lower()])
        return ParsedMove(None, str(calls))

    # ------------------------------------------------------------------ dynamics
    def _step(self, action: str) -> StepOutcome:
        task = self._task
        assert task is not None
        s = self._cell
        h = self.turns_left
        parsed = self._read(action)
        if parsed.action is None:
            return self._refuse(parsed.error or PARSE_HELP)
        a = parsed.action
        score = task.oracle.score_table(h)[s][a]
        outcome = task.dynamics.sample(s, a, self.np_random.random())
        key = (s, a, outcome.direction)
        cached = task.observations.get(key)
        if cached is None:
            s2 = outcome.next_state
            row, col = divmod(s2, task.lake.ncol)
            feedback = move_feedback(
                a, outcome.direction, s2 != s, task.lake.desc[row][col], row, col
            )
            block = task.renderer.block(s2)
            text = block if task.renderer.compact else f"{feedback.text}\n{block}"
            cached = (text, feedback.event)
            task.observations[key] = cached
        observation, event = cached
        self._cell = outcome.next_state
        self._event = event
        reached = outcome.terminated and outcome.reward > 0
        return StepOutcome(
            observation,
            float(outcome.reward),
            bool(outcome.terminated),
            bool(reached),
            score,
            info=_ScalarInfo(
                event=event,
                cell=self._cell,
                slipped=outcome.direction != a,
                state_value=task.oracle.value(s, h),
            ),
        )

    def _refuse(self, message: str) -> StepOutcome:
        """A reply with no readable move (or too long to read): a turn spent in place."""
        task = self._task
        assert task is not None
        s, h = self._cell, self.turns_left
        self._event = "parse_error"
        return StepOutcome(
            f"{message} You did not move.\n{task.renderer.block(s)}",
            0.0,
            False,
            False,
            task.oracle.noop_score(s, h),
            parse_error=message,
            info=_ScalarInfo(
                event="parse_error", cell=s, slipped=False, state_value=task.oracle.value(s, h)
            ),
        )

    def _get_state(self) -> Any:
        return {"task_id": self._task_id, "cell": self._cell, "event": self._event}

    def _set_state(self, state: Any) -> None:
        self._activate(state["task_id"])
        self._cell = int(state["cell"])
        self._event = str(state["event"])

    # ------------------------------------------------------------------ oracle hooks
    def valid_actions(self) -> Sequence[str]:
        return ACTION_NAMES

    def score_action(self, action: str) -> float:
        """The oracle's score of ``action`` here (no state change, no random draw)."""
        self._require_live()
        task = self._live_task()
        h = self.turns_left
        if len(action) > self.max_action_chars:  # refused unread by step(), as a no-op
            return task.oracle.noop_score(self._cell, h)
        parsed = self._read(action)
        if parsed.action is None:
            return task.oracle.noop_score(self._cell, h)
        return task.oracle.score_table(h)[self._cell][parsed.action]

    def expert_action(self) -> str:
        return ACTION_NAMES[self._live_task().oracle.expert(self._cell, self.turns_left)]

    def error_action(self, rng: np.random.Generator) -> str:
        task = self._live_task()
        return ACTION_NAMES[task.oracle.error(self._cell, self.turns_left, rng)]

    def state_key(self) -> str:
        """``"<task_id>:<cell>"``: the exact GiGPO anchor (the cell is the whole state)."""
        return f"{self._task_id}:{self._cell}"

    # ------------------------------------------------------------------ introspection
    def _live_task(self) -> _Task:
        if self._task is None:
            raise RuntimeError("call reset() first: no FrozenLake task is loaded")
        return self._task

    @property
    def cell(self) -> int:
        """The agent's cell index ``row * ncol + col`` (Gymnasium's observation)."""
        return self._cell

    @property
    def event(self) -> str:
        """What happened last turn (see :data:`multiturn_envs.envs.frozenlake.render.EVENTS`)."""
        return self._event

    @property
    def desc(self) -> tuple[str, ...]:
        """The current map's rows."""
        return self._live_task().lake.desc

    @property
    def dynamics(self) -> LakeDynamics:
        """The current map's exact transition model."""
        return self._live_task().dynamics

    @property
    def oracle(self) -> LakeOracle:
        """The current map's DP oracle."""
        return self._live_task().oracle
