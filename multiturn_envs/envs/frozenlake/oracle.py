"""The exact FrozenLake oracle: dynamic programming over the transition table, vectorised.

Three value functions of one map (all on the goal-only reward: 1 for entering G, else 0):

* finite horizon: ``Q_h(s, a) = sum_k p_k (r_k + (1 - d_k) V_{h-1}(s'_k))``, ``V_h = max_a Q_h``,
  ``V_0 = 0``. ``Q_h(s, a)`` is the probability of reaching the goal within ``h`` turns when
  ``a`` is played now and optimally afterwards; it is what a turn budget makes matter;
* infinite horizon, undiscounted: the limit ``h -> inf``, the best reach probability with no
  budget (value iteration from 0 converges to it from below);
* infinite horizon, discounted by ``gamma``: prefers short paths whatever the budget; used to
  break ties between actions of equal finite-horizon value and offered for reward shaping.

Each Bellman backup is a handful of numpy operations: a dense ``(4n x n)`` matrix-vector product
for maps of up to 256 cells, a gather over padded ``(n, 4, 3)`` arrays (at most three outcomes
per action) beyond, so a 100-step horizon on an 8x8 map takes about a millisecond.
Results are cached on the :class:`LakeOracle` (one per map and slip setting); the finite-horizon
table grows to the largest horizon asked for.

Scores (see ``docs/envs/frozenlake.md``) are normalised at the state: ``Q_h(s, a) / V_h(s)``,
1.0 when ``V_h(s) = 0``.
"""

from __future__ import annotations

import numpy as np

from multiturn_envs.envs.frozenlake.dynamics import N_ACTIONS, LakeDynamics

SUBOPTIMAL_EPS = 1e-9
_TOL = 1e-13
_MAX_ITERATIONS = 200_000
_DENSE_MAX_STATES = 256


def normalise(q: np.ndarray) -> np.ndarray:
    """Scores from Q values, row by row: ``Q / max Q``, 1.0 for rows whose max is 0.

    Values within ``1e-12`` (relative) of the row's best are set to exactly 1.0, so that moves
    of equal value, whose sums differ only by float rounding, tie exactly.
    """
    best = q.max(axis=-1, keepdims=True)
    safe = np.where(best > 0.0, best, 1.0)
    scores = np.clip(q / safe, 0.0, 1.0)
    scores[scores >= 1.0 - 1e-12] = 1.0
    return np.where(best > 0.0, scores, 1.0)


class LakeOracle:
    """Exact values and oracle actions for one :class:`LakeDynamics`.

    Args:
        dynamics: the map's transition model.
        gamma: discount of the discounted infinite-horizon Q, in (0, 1).
    """

    def __init__(self, dynamics: LakeDynamics, gamma: float = 0.99) -> None:
        if not 0.0 < gamma < 1.0:
            raise ValueError(f"gamma must be in (0, 1), got {gamma}")
        self.dynamics = dynamics
        self.gamma = float(gamma)
        n = dynamics.n_states
        rew = np.zeros((n, N_ACTIONS, 3))
        cont = np.zeros((n, N_ACTIONS, 3))
        hole = np.zeros((n, N_ACTIONS, 3))
        for s, row in enumerate(dynamics.outcomes):
            for a, entries in enumerate(row):
                for k, o in enumerate(entries):
                    rew[s, a, k] = o.reward
                    cont[s, a, k] = 0.0 if o.terminated else 1.0
                    hole[s, a, k] = 1.0 if (o.terminated and o.reward == 0) else 0.0
        prob = dynamics.prob
        live = ~dynamics.is_terminal
        self.end_prob = np.where(live[:, None], (prob * (1.0 - cont)).sum(axis=2), 0.0)
        self.hole_prob = np.where(live[:, None], (prob * hole).sum(axis=2), 0.0)
        # Internally action-major, (4, n): a reduction over the 4 actions then runs along
        # contiguous rows, which numpy does several times faster than over a short last axis.
        self._next = np.ascontiguousarray(dynamics.next_state.transpose(1, 0, 2))
        self._continue_prob = np.ascontiguousarray((prob * cont).transpose(1, 0, 2))
        self._expected_reward = np.ascontiguousarray((prob * rew).sum(axis=2).T)
        self._dense: np.ndarray | None = None
        if n <= _DENSE_MAX_STATES:
            # Small maps: the backup is one (4n x n) matrix-vector product, several times
            # faster than gathering; large maps keep the O(12 n) padded gather.
            dense = np.zeros((N_ACTIONS * n, n))
            rows = np.repeat(np.arange(N_ACTIONS * n), 3)
            np.add.at(dense, (rows, self._next.reshape(-1)), self._continue_prob.reshape(-1))
            self._dense = dense
        self._q_finite = np.zeros((1, N_ACTIONS, n))
        self._v_finite = np.zeros((1, n))
        self._score_tables: dict[int | None, list[list[float]]] = {}
        self._q_reach: np.ndarray | None = None
        self._q_discounted: np.ndarray | None = None

    # ------------------------------------------------------------------ value functions
    def _backup(self, v: np.ndarray, discount: float = 1.0) -> np.ndarray:
        """One Bellman backup of ``v``: action-major ``(4, n)`` Q values."""
        if self._dense is not None:
            future = (self._dense @ v).reshape(self._expected_reward.shape)
        else:
            future = (self._continue_prob * v[self._next]).sum(axis=2)
        if discount != 1.0:
            future *= discount
        future += self._expected_reward
        return future

    def finite_q(self, h: int) -> np.ndarray:
        """``Q_h`` as an ``(n_states, 4)`` array (a read-only view); ``Q_0 = 0``."""
        if h < 0:
            raise ValueError(f"horizon must be >= 0, got {h}")
        have = self._q_finite.shape[0] - 1
        if h > have:
            q = np.empty((h + 1, *self._q_finite.shape[1:]))
            v = np.empty((h + 1, self._v_finite.shape[1]))
            q[: have + 1] = self._q_finite
            v[: have + 1] = self._v_finite
            backup = self._backup
            for k in range(have + 1, h + 1):
                q[k] = backup(v[k - 1])
                np.max(q[k], axis=0, out=v[k])
            q.flags.writeable = False
            v.flags.writeable = False
            self._q_finite, self._v_finite = q, v
        return self._q_finite[h].T

    def finite_v(self, h: int) -> np.ndarray:
        """``V_h = max_a Q_h``: the best probability of reaching the goal within ``h`` turns."""
        self.finite_q(h)
        return self._v_finite[h]

    def _iterate(self, discount: float) -> np.ndarray:
        v = np.zeros(self.dynamics.n_states)
        for _ in range(_MAX_ITERATIONS):
            v_new = self._backup(v, discount).max(axis=0)
            if np.max(np.abs(v_new - v)) < _TOL:
                q = self._backup(v_new, discount).T
                q.flags.writeable = False
                return q
            v = v_new
        raise RuntimeError(f"value iteration did not converge in {_MAX_ITERATIONS} sweeps")

    def reach_q(self) -> np.ndarray:
        """Undiscounted infinite-horizon Q: the best reach probability after ``a`` (no budget)."""
        if self._q_reach is None:
            self._q_reach = self._iterate(1.0)
        return self._q_reach

    def discounted_q(self) -> np.ndarray:
        """Discounted infinite-horizon Q with ``gamma`` (goal reward 1)."""
        if self._q_discounted is None:
            self._q_discounted = self._iterate(self.gamma)
        return self._q_discounted

    # ------------------------------------------------------------------ scores
    def q_values(self, s: int, h: int | None) -> np.ndarray:
        """The four ``Q`` values at ``s`` with ``h`` turns left (``None``: no budget)."""
        return self.reach_q()[s] if h is None else self.finite_q(h)[s]

    def scores(self, s: int, h: int | None) -> np.ndarray:
        """Normalised scores of the four moves: ``Q_h(s, a) / V_h(s)``, all 1.0 if ``V_h = 0``."""
        return np.asarray(self.score_table(h)[s])

    def score_table(self, h: int | None) -> list[list[float]]:
        """``scores`` for every state as nested lists (memoised per ``h``: a step is a lookup)."""
        table = self._score_tables.get(h)
        if table is None:
            q = self.reach_q() if h is None else self.finite_q(h)
            table = normalise(q).tolist()
            self._score_tables[h] = table
        return table

    def score(self, s: int, a: int, h: int | None) -> float:
        """Normalised score of move ``a`` at ``s`` with ``h`` turns left including this one."""
        return float(self.scores(s, h)[a])

    def noop_score(self, s: int, h: int | None) -> float:
        """Score of a turn that does not move (unparseable reply): ``V_{h-1}(s) / V_h(s)``.

        Without a budget a wasted turn loses nothing, so it scores 1.0.
        """
        if h is None:
            return 1.0
        best = float(self.finite_v(h)[s])
        if best <= 0.0:
            return 1.0
        ratio = float(self.finite_v(h - 1)[s] / best)
        return 1.0 if ratio >= 1.0 - 1e-12 else max(ratio, 0.0)

    # ------------------------------------------------------------------ actions
    def expert(self, s: int, h: int | None) -> int:
        """An optimal move: highest ``Q_h``, ties by discounted Q, then lowest action index."""
        q = self.q_values(s, h)
        tied = np.flatnonzero(q >= q.max() - SUBOPTIMAL_EPS)
        if len(tied) == 1:
            return int(tied[0])
        dq = self.discounted_q()[s, tied]
        return int(tied[int(np.argmax(dq >= dq.max() - SUBOPTIMAL_EPS))])

    def error(self, s: int, h: int | None, rng: np.random.Generator) -> int:
        """A wrong move that keeps the episode going whenever the map allows it.

        Candidates are ranked by, in order: can the move end the episode this turn (no
        first); is it strictly suboptimal (``score < 1 - 1e-9``; yes first); its probability
        of falling into a hole; its probability of ending the episode; its discounted Q (lower
        first: the "least good" of tied moves). ``rng`` picks uniformly among the moves tied
        on the whole ranking. So the result is a strictly suboptimal move that cannot end the
        episode when one exists; otherwise a move that cannot end the episode (the least good
        by the discounted tie-break); otherwise the least risky suboptimal move.
        """
        scores = self.scores(s, h)
        dq = self.discounted_q()[s]
        keys = [
            (
                bool(self.end_prob[s, a] > 0.0),
                bool(scores[a] >= 1.0 - SUBOPTIMAL_EPS),
                round(float(self.hole_prob[s, a]), 12),
                round(float(self.end_prob[s, a]), 12),
                round(float(dq[a]), 12),
            )
            for a in range(N_ACTIONS)
        ]
        best = min(keys)
        candidates = [a for a in range(N_ACTIONS) if keys[a] == best]
        return candidates[int(rng.integers(len(candidates)))]
