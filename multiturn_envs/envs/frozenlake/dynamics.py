"""FrozenLake's transition table, built exactly as Gymnasium's ``FrozenLakeEnv`` builds ``P``.

Two views of one table:

* :meth:`LakeDynamics.gym_table`: Gymnasium's ``P[s][a] = [(prob, next_s, reward, terminated)]``
  with the same entry order and the same float values, so tests can compare it with
  ``FrozenLakeEnv(desc=...).P`` for equality;
* padded numpy arrays (``next_state[s, a, k]``, ``prob[s, a, k]``, k < 3) for the vectorised
  dynamic programming in :mod:`multiturn_envs.envs.frozenlake.oracle`.

Sampling copies ``gymnasium.envs.toy_text.utils.categorical_sample``: one ``random()`` draw,
the first index whose cumulative probability exceeds it, and index 0 when none does (float
cumsums can end just below 1.0). Cumulative sums are precomputed with ``np.cumsum`` on the same
floats, so the chosen index, hence the trajectory, is the one Gymnasium picks for the same draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
ACTION_NAMES: tuple[str, ...] = ("Left", "Down", "Right", "Up")
N_ACTIONS = 4
MAX_OUTCOMES = 3


@dataclass(frozen=True)
class Outcome:
    """One entry of ``P[s][a]``, plus the direction actually taken (for the feedback text)."""

    prob: float
    next_state: int
    reward: float
    terminated: bool
    direction: int


class LakeDynamics:
    """The exact transition model of one map under one slip setting.

    Args:
        desc: the map rows.
        is_slippery: Gymnasium's ``is_slippery``.
        success_rate: probability of moving in the intended direction when slippery; the two
            perpendicular directions share the rest equally (Gymnasium >= 1.2 semantics).
    """

    def __init__(self, desc: tuple[str, ...], is_slippery: bool, success_rate: float) -> None:
        if not 0.0 <= success_rate <= 1.0:
            raise ValueError(f"success_rate must be in [0, 1], got {success_rate}")
        self.desc = desc
        self.nrow, self.ncol = len(desc), len(desc[0])
        self.n_states = self.nrow * self.ncol
        self.is_slippery = bool(is_slippery)
        self.success_rate = float(success_rate)
        tiles = "".join(desc)
        self.tiles = tiles
        self.is_hole = np.array([t == "H" for t in tiles])
        self.is_goal = np.array([t == "G" for t in tiles])
        self.is_terminal = self.is_hole | self.is_goal
        starts = np.array([t == "S" for t in tiles], dtype="float64")
        self.initial_distribution = starts / starts.sum()
        self._initial_cumsum = tuple(float(c) for c in np.cumsum(self.initial_distribution))
        self.outcomes: tuple[tuple[tuple[Outcome, ...], ...], ...] = tuple(
            tuple(self._entries(s, a) for a in range(N_ACTIONS)) for s in range(self.n_states)
        )
        self.cumsums: tuple[tuple[tuple[float, ...], ...], ...] = tuple(
            tuple(
                tuple(float(c) for c in np.cumsum(np.asarray([o.prob for o in entries])))
                for entries in row
            )
            for row in self.outcomes
        )
        shape = (self.n_states, N_ACTIONS, MAX_OUTCOMES)
        # Padded arrays (unused slots: probability 0, next state = s, terminal, no reward).
        self.next_state = np.zeros(shape, dtype=np.intp)
        self.prob = np.zeros(shape)
        self.reward = np.zeros(shape)
        self.terminated = np.ones(shape, dtype=bool)
        for s, row in enumerate(self.outcomes):
            for a, entries in enumerate(row):
                self.next_state[s, a, :] = s
                for k, o in enumerate(entries):
                    self.next_state[s, a, k] = o.next_state
                    self.prob[s, a, k] = o.prob
                    self.reward[s, a, k] = o.reward
                    self.terminated[s, a, k] = o.terminated
        # One dynamics object is shared by every env instance of the same settings
        # (``env.build_task``): make its arrays read-only so no user can change another's map.
        for array in (
            self.is_hole,
            self.is_goal,
            self.is_terminal,
            self.initial_distribution,
            self.next_state,
            self.prob,
            self.reward,
            self.terminated,
        ):
            array.flags.writeable = False

    def _move(self, row: int, col: int, direction: int) -> int:
        if direction == LEFT:
            col = max(col - 1, 0)
        elif direction == DOWN:
            row = min(row + 1, self.nrow - 1)
        elif direction == RIGHT:
            col = min(col + 1, self.ncol - 1)
        else:
            row = max(row - 1, 0)
        return row * self.ncol + col

    def _entries(self, s: int, a: int) -> tuple[Outcome, ...]:
        if self.tiles[s] in "GH":
            return (Outcome(1.0, s, 0, True, a),)
        row, col = divmod(s, self.ncol)
        fail_rate = (1.0 - self.success_rate) / 2.0
        directions: tuple[int, ...]
        if self.is_slippery:
            directions = ((a - 1) % 4, a, (a + 1) % 4)
            probs = [fail_rate if b != a else self.success_rate for b in directions]
        else:
            directions, probs = (a,), [1.0]
        entries = []
        for b, p in zip(directions, probs):
            s2 = self._move(row, col, b)
            tile = self.tiles[s2]
            entries.append(Outcome(p, s2, 1 if tile == "G" else 0, tile in "GH", b))
        return tuple(entries)

    def gym_table(self) -> dict[int, dict[int, list[tuple[float, int, float, bool]]]]:
        """``P`` in Gymnasium's layout (goal reward 1, others 0: the default schedule)."""
        return {
            s: {
                a: [(o.prob, o.next_state, o.reward, o.terminated) for o in self.outcomes[s][a]]
                for a in range(N_ACTIONS)
            }
            for s in range(self.n_states)
        }

    def sample_start(self, u: float) -> int:
        """The start cell for the uniform draw ``u`` (Gymnasium's reset sampling)."""
        return _first_above(self._initial_cumsum, u)

    def sample(self, s: int, a: int, u: float) -> Outcome:
        """The outcome of action ``a`` at ``s`` for the uniform draw ``u`` (Gymnasium's step)."""
        return self.outcomes[s][a][_first_above(self.cumsums[s][a], u)]


def _first_above(cumsum: tuple[float, ...], u: float) -> int:
    """``np.argmax(cumsum > u)``: the first index above ``u``, or 0 when there is none."""
    for i, c in enumerate(cumsum):
        if c > u:
            return i
    return 0
