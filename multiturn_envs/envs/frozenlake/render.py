"""Text rendering of a FrozenLake state: the grid, a legend, the position, last turn's feedback.

Two observation formats (the env's ``observation`` argument): ``"full"`` (last turn's feedback
in words, the grid, a legend and the position) and ``"compact"`` (the grid alone after each
move, RAGEN's observation; the legend once, in the first observation).

Glyphs default to RAGEN's (``P`` you, ``_`` frozen, ``O`` hole, ``G`` goal, ``X`` you in a
hole, ``√`` you on the goal; the start tile is drawn as frozen ice), the most common text
FrozenLake in the RL-for-LLM literature. The part of an observation that depends only on the
cell (grid, legend, position) is built once per cell and memoised, so a step costs one string
concatenation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from multiturn_envs.envs.frozenlake.dynamics import ACTION_NAMES

RAGEN_GLYPHS: dict[str, str] = {
    "player": "P",
    "frozen": "_",
    "hole": "O",
    "goal": "G",
    "player_in_hole": "X",
    "player_on_goal": "√",
}

OBSERVATIONS: tuple[str, ...] = ("full", "compact")
"""The observation formats (see the module note)."""

# What happened last turn (``info["event"]``).
EVENTS: tuple[str, ...] = (
    "start",
    "moved",
    "slipped",
    "bumped_wall",
    "fell_in_hole",
    "reached_goal",
    "parse_error",
)


@dataclass(frozen=True)
class Feedback:
    """Last turn in words, and its event code."""

    text: str
    event: str


def move_feedback(
    intended: int, actual: int, moved: bool, tile: str, row: int, col: int
) -> Feedback:
    """Describe one move: intended vs actual direction, a wall bump, a hole, the goal."""
    want = ACTION_NAMES[intended]
    if actual == intended:
        if moved:
            text, event = f"You moved {want} to row {row}, column {col}.", "moved"
        else:
            text = f"You tried to move {want} but bumped into the edge of the lake and stayed put."
            event = "bumped_wall"
    else:
        got = ACTION_NAMES[actual]
        if moved:
            text = f"You tried to move {want} but slipped {got} to row {row}, column {col}."
            event = "slipped"
        else:
            text = (
                f"You tried to move {want}, slipped {got} into the edge of the lake and stayed put."
            )
            event = "bumped_wall"
    if tile == "H":
        return Feedback(f"{text} You fell into a hole. The episode is over.", "fell_in_hole")
    if tile == "G":
        return Feedback(f"{text} You reached the goal! The episode is over.", "reached_goal")
    return Feedback(text, event)


def check_observation(observation: str) -> None:
    """Raise a clear ``ValueError`` for an unknown observation format."""
    if observation not in OBSERVATIONS:
        raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")


def check_glyph_keys(glyphs: Mapping[str, str] | None) -> None:
    """Raise a clear ``ValueError`` for glyph overrides that name no known glyph."""
    unknown = set(glyphs or {}) - set(RAGEN_GLYPHS)
    if unknown:
        raise ValueError(f"unknown glyph keys {sorted(unknown)}; known: {list(RAGEN_GLYPHS)}")


class LakeRenderer:
    """Draws one map; ``block(cell)`` is what an observation shows of the state with the agent at
    ``cell``: grid + legend + position (``"full"``) or the grid alone (``"compact"``).

    Args:
        desc: the map rows.
        separator: text between the cells of a row (RAGEN: none; rLLM: two spaces).
        glyphs: overrides of :data:`RAGEN_GLYPHS` by key.
        observation: the format, one of :data:`OBSERVATIONS`.
    """

    def __init__(
        self,
        desc: tuple[str, ...],
        separator: str = "",
        glyphs: Mapping[str, str] | None = None,
        observation: str = "full",
    ) -> None:
        check_glyph_keys(glyphs)
        check_observation(observation)
        self.compact = observation == "compact"
        self.glyphs = {**RAGEN_GLYPHS, **(glyphs or {})}
        self.separator = separator
        self.desc = desc
        self.ncol = len(desc[0])
        g = self.glyphs
        tile_glyph = {"S": g["frozen"], "F": g["frozen"], "H": g["hole"], "G": g["goal"]}
        self._rows = [[tile_glyph[t] for t in row] for row in desc]
        self._player = {"S": g["player"], "F": g["player"]}
        self._player.update(H=g["player_in_hole"], G=g["player_on_goal"])
        self.legend = (
            f"Legend: {g['player']} = you, {g['frozen']} = frozen ice, {g['hole']} = hole, "
            f"{g['goal']} = goal, {g['player_in_hole']} = you in a hole, "
            f"{g['player_on_goal']} = you on the goal."
        )
        self._blocks: dict[int, str] = {}

    def grid(self, cell: int) -> str:
        """The map with the agent drawn at ``cell``."""
        row, col = divmod(cell, self.ncol)
        rows = [list(r) for r in self._rows]
        rows[row][col] = self._player[self.desc[row][col]]
        return "\n".join(self.separator.join(r) for r in rows)

    def block(self, cell: int) -> str:
        """Grid, legend and position for ``cell``, or the grid alone when compact (memoised)."""
        text = self._blocks.get(cell)
        if text is None and self.compact:
            text = self._blocks[cell] = self.grid(cell)
        elif text is None:
            row, col = divmod(cell, self.ncol)
            text = (
                f"{self.grid(cell)}\n{self.legend}\n"
                f"Your position: row {row}, column {col} (row 0 is the top, column 0 the left)."
            )
            self._blocks[cell] = text
        return text
