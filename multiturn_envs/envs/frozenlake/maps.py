"""FrozenLake maps and the task ids that name them.

A task id names one map, so that ``reset(options={"task_id": ...})`` is all it takes to fix a
task and the id alone reproduces it anywhere:

* ``"4x4"``, ``"8x8"``: Gymnasium's standard maps (``gymnasium.envs.toy_text.frozen_lake.MAPS``);
* ``"random-s{size}-p{p}-n{seed}"``: a random solvable ``size x size`` map in which each tile is
  frozen with probability ``p``. It is the map ``generate_random_map(size, p, seed)`` of
  Gymnasium gives for the same arguments (same draws from the same seeded generator, same
  redraw-until-solvable loop), but built here so that no map ever comes from an unseeded
  generator (``gym.make("FrozenLake-v1", map_name=None)`` draws one from OS entropy);
* ``"map:SFFF/FHFH/FFFH/HFFG"``: any map spelled out, rows separated by ``/`` (letters S start,
  F frozen, H hole, G goal; rectangular; at least one S, as in Gymnasium).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

STANDARD_MAPS: dict[str, tuple[str, ...]] = {
    "4x4": ("SFFF", "FHFH", "FFFH", "HFFG"),
    "8x8": (
        "SFFFFFFF",
        "FFFFFFFF",
        "FFFHFFFF",
        "FFFFFHFF",
        "FFFHFFFF",
        "FHHFFFHF",
        "FHFFHFHF",
        "FFFHFFFG",
    ),
}

MAX_SIZE = 64
_MAX_REDRAWS = 100_000
_RANDOM_ID = re.compile(r"random-s(\d+)-p([0-9]*\.?[0-9]+)-n(\d+)")
_TILES = frozenset("SFHG")


@dataclass(frozen=True)
class LakeMap:
    """One map: its task id and its rows (``desc`` in Gymnasium's terms)."""

    task_id: str
    desc: tuple[str, ...]

    @property
    def nrow(self) -> int:
        return len(self.desc)

    @property
    def ncol(self) -> int:
        return len(self.desc[0])


def random_task_id(size: int, p: float, seed: int) -> str:
    """The task id of the random map with these parameters (``p`` written as ``repr``)."""
    return f"random-s{size}-p{float(p)!r}-n{seed}"


def is_solvable(board: np.ndarray) -> bool:
    """Whether a path of non-hole tiles leads from (0, 0) to a goal (Gymnasium's DFS rule)."""
    nrow, ncol = board.shape
    frontier, seen = [(0, 0)], set()
    while frontier:
        r, c = frontier.pop()
        if (r, c) in seen:
            continue
        seen.add((r, c))
        for dr, dc in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            rn, cn = r + dr, c + dc
            if not (0 <= rn < nrow and 0 <= cn < ncol):
                continue
            if board[rn][cn] == "G":
                return True
            if board[rn][cn] != "H":
                frontier.append((rn, cn))
    return False


def random_map(size: int, p: float, seed: int) -> tuple[str, ...]:
    """A solvable random map, S at the top left and G at the bottom right.

    Draws exactly as Gymnasium's ``generate_random_map`` does (``default_rng(seed)``, one
    ``choice(["F", "H"], (size, size), p=[p, 1 - p])`` per attempt, redrawn until solvable),
    so the maps agree; unlike it, a hopeless ``p`` raises instead of looping forever.
    """
    if not 2 <= size <= MAX_SIZE:
        raise ValueError(f"random map size must be in [2, {MAX_SIZE}], got {size}")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p (probability that a tile is frozen) must be in (0, 1], got {p}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    p = min(1.0, p)
    for _ in range(_MAX_REDRAWS):
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p])
        board[0][0] = "S"
        board[-1][-1] = "G"
        if is_solvable(board):
            return tuple("".join(row) for row in board)
    raise ValueError(f"no solvable {size}x{size} map with p={p} after {_MAX_REDRAWS} draws")


def validate_desc(desc: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``desc`` is a rectangular map of S/F/H/G with an S."""
    if not desc or not desc[0]:
        raise ValueError("a map needs at least one row and one column")
    if len(desc) > MAX_SIZE or len(desc[0]) > MAX_SIZE:
        raise ValueError(f"maps are at most {MAX_SIZE}x{MAX_SIZE}")
    if any(len(row) != len(desc[0]) for row in desc):
        raise ValueError(f"map rows differ in length: {list(desc)}")
    bad = set("".join(desc)) - _TILES
    if bad:
        raise ValueError(f"map has tiles other than S, F, H, G: {sorted(bad)}")
    if not any("S" in row for row in desc):
        raise ValueError("a map needs at least one start tile S")


def parse_task_id(task_id: str) -> LakeMap:
    """The map a task id names, or a ``ValueError`` that says which ids exist."""
    if task_id in STANDARD_MAPS:
        return LakeMap(task_id, STANDARD_MAPS[task_id])
    match = _RANDOM_ID.fullmatch(task_id)
    if match:
        size, p, seed = int(match[1]), float(match[2]), int(match[3])
        return LakeMap(task_id, random_map(size, p, seed))
    if task_id.startswith("map:"):
        desc = tuple(task_id[4:].split("/"))
        validate_desc(desc)
        return LakeMap(task_id, desc)
    raise ValueError(
        f"unknown FrozenLake task id {task_id!r}: use '4x4', '8x8', "
        "'random-s<size>-p<frozen prob>-n<seed>' or 'map:<row>/<row>/...'"
    )


def validate_task_id(task_id: str) -> None:
    """Raise ``ValueError`` for a malformed id without drawing a random map (cheap)."""
    match = _RANDOM_ID.fullmatch(task_id)
    if match:
        size, p = int(match[1]), float(match[2])
        if not 2 <= size <= MAX_SIZE or not 0.0 < p <= 1.0:
            raise ValueError(f"bad random map id {task_id!r}: size in [2, {MAX_SIZE}], p in (0, 1]")
        return
    parse_task_id(task_id)


def desc_task_id(desc: tuple[str, ...] | list[str]) -> str:
    """The ``map:`` task id that spells out ``desc``."""
    return "map:" + "/".join(desc)
