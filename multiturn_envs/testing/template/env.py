"""MT/Lights-v0, the env template: switch every light of a row on.

Each step of the "add an env" checklist (CONTRIBUTING.md) is marked ``# Checklist N`` where the
code does it. A row of lights, some on (``1``) and some off (``0``); toggling light ``i`` flips
it and its neighbours. The task is solved when every light is on. Small as it is, it has what
every MT/* env has: tasks in a data file, a text action form and a typed tool, an exact oracle
(the shortest solution by breadth-first search), error actions, exact snapshots, and replies
read within bounds.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from multiturn_envs.core import BudgetMode, StepOutcome, TextEnv
from multiturn_envs.tools import Tool, ToolCall

# Checklist 1: task data in a data file beside the code, read through importlib.resources (the
# wheel ships *.json: pyproject.toml's package-data); bounded (a task is a short row).
MAX_LIGHTS = 12
TASKS: dict[str, str] = {
    str(t["task_id"]): str(t["lights"])
    for t in json.loads(resources.files(__package__).joinpath("tasks.json").read_text("utf-8"))
}

# Checklist 1: the env's actions, declared once as a typed tool.
TOGGLE = Tool(
    "toggle",
    "Toggle light `index` (0 is the leftmost): it and its neighbours flip.",
    {
        "type": "object",
        "properties": {"index": {"type": "integer", "description": "the light to toggle"}},
        "required": ["index"],
    },
)
HELP = "Reply with one move: 'toggle N', N the index of a light (0 is the leftmost)."


def toggled(lights: str, index: int) -> str:
    """The row after toggling ``index``."""
    row = list(lights)
    for i in (index - 1, index, index + 1):
        if 0 <= i < len(row):
            row[i] = "1" if row[i] == "0" else "0"
    return "".join(row)


@lru_cache(maxsize=4096)
def distance(lights: str) -> int | None:
    """The fewest toggles that switch every light on (``None``: impossible), by breadth-first
    search over the 2**n rows (n <= MAX_LIGHTS: at most 4,096 states)."""
    goal = "1" * len(lights)
    seen = {lights: 0}
    queue = deque([lights])
    while queue:
        row = queue.popleft()
        if row == goal:
            return seen[row]
        for i in range(len(row)):
            nxt = toggled(row, i)
            if nxt not in seen:
                seen[nxt] = seen[row] + 1
                queue.append(nxt)
    return None


class LightsEnv(TextEnv):
    """Switch every light of a row on, one toggle a turn.

    ## Description
    A row of lights, ``1`` on and ``0`` off; ``toggle i`` flips light ``i`` and its neighbours.

    ## Action Space
    Text: ``toggle N``; or the ``toggle`` tool (``{"index": N}``).

    ## Rewards
    1.0 on the turn every light is on, else 0.

    ## Episode End
    Terminated when solved; truncated when the turn budget is spent.

    ## Arguments
    * ``max_turns`` (8), ``budget_mode`` ("hidden"), ``render_mode``: the base class's.

    ## Turn Budget
    Owned by the base class: every reply is a turn, unreadable ones included.

    ## Oracle
    ``step_score`` is 1.0 for a toggle that brings the row one step closer to the goal, 0.0
    otherwise; ``expert_action`` is the first toggle of a shortest solution;
    ``error_action`` a toggle that does not.
    """

    def __init__(
        self,
        max_turns: int | None = 8,
        budget_mode: BudgetMode = "hidden",
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, budget_mode=budget_mode, render_mode=render_mode)
        self._lights = ""

    # Checklist 1: the task logic. The base class owns the budget, info, history, snapshots.
    def task_ids(self) -> Sequence[str]:
        return list(TASKS)

    def _load_task(self, task_id: str, options: dict[str, Any]) -> str:
        if task_id not in TASKS:
            raise ValueError(f"unknown task {task_id!r}: use one of {sorted(TASKS)}")
        self._lights = TASKS[task_id]
        return f"Switch every light on. Lights: {self._lights}. {HELP}"

    def system_prompt(self) -> str:
        return f"You switch lights on. {HELP}"

    def tools(self) -> Sequence[Tool]:
        return (TOGGLE,)

    def as_tool_call(self, action: str) -> ToolCall | None:
        index = self._index(action)
        return None if index is None else ToolCall("toggle", {"index": index})

    def _index(self, action: str) -> int | None:
        """The light a text reply toggles (``None``: not a move)."""
        parts = action.strip().split()
        if len(parts) == 2 and parts[0].lower() == "toggle" and parts[1].isdigit():
            index = int(parts[1][:4])  # a bounded read: never a million-digit int
            return index if index < len(self._lights) else None
        return None

    # Checklist 1: every reply is untrusted: answered within bounds, never an exception.
    def _step(self, action: str) -> StepOutcome:
        calls = self.read_tool_calls(action)
        if calls is None:
            index = self._index(action)
        elif isinstance(calls, list):
            index = int(calls[0].arguments["index"])
            index = index if 0 <= index < len(self._lights) else None
        else:  # a malformed call: its error is the observation
            return self._refuse(str(calls))
        if index is None:
            return self._refuse(HELP)
        before = distance(self._lights)
        self._lights = toggled(self._lights, index)
        after = distance(self._lights)
        score = 1.0 if before is not None and after is not None and after < before else 0.0
        solved = "0" not in self._lights
        text = "All lights are on!" if solved else f"Lights: {self._lights}."
        return StepOutcome(text, float(solved), solved, solved, score)

    def valid_actions(self) -> Sequence[str]:
        return [f"toggle {i}" for i in range(len(self._lights))]

    # Checklist 1: the oracle and exact snapshots.
    def expert_action(self) -> str:
        here = distance(self._lights)
        for action in self.valid_actions():
            nxt = distance(toggled(self._lights, int(action.split()[1])))
            if here is not None and nxt is not None and nxt < here:
                return action
        return "toggle 0"

    def error_action(self, rng: np.random.Generator) -> str:
        here = distance(self._lights)
        wrong = [
            a
            for a in self.valid_actions()
            if (d := distance(toggled(self._lights, int(a.split()[1])))) is None
            or here is None
            or d >= here
        ]
        options = wrong or list(self.valid_actions())
        return options[int(rng.integers(len(options)))]

    def _get_state(self) -> Any:
        return {"lights": self._lights}

    def _set_state(self, state: Any) -> None:
        self._lights = str(state["lights"])

    def state_key(self) -> str:
        return self._lights
