"""The exact FrozenLake oracle: dynamic programming over the transition table, vectorised.

Three value functions of one map (all on the goal-only reward: 1 for entering G, else 0):

* finite horizon: ``Q_h(s, a) = sum_k p_k (r_k + (1 - d_k) V_{h-1}(s'_k))``, ``V_h = max_a Q_h``,
  ``V_0 = 0``. ``Q_h(s, a)`` is the probability of reaching the goal within ``h`` turns when
  ``a`` is played now and optimally afterwards; it is what a turn budget makes matter;
* infinite horizon, undiscounted: the limit ``h -> inf``, the best reach probability with no
  budget. Value iteration converges to it arbitrarily slowly (near-deterministic slips make
  loops that leak a little per sweep), so it is solved exactly by policy iteration with
  linear solves (maps up to 1024 cells; value iteration to 1e-13 beyond);
* infinite horizon, discounted by ``gamma``: prefers short paths whatever the budget; used to
  break ties between actions of equal finite-horizon value and offered for reward shaping
  (solved the same way).

Each Bellman backup is a handful of numpy operations: a dense ``(4n x n)`` matrix-vector product
for maps of up to 256 cells, a gather over padded ``(n, 4, 3)`` arrays (at most three outcomes
per action) beyond, so a 100-step horizon on an 8x8 map takes about a millisecond.
Results are cached on the :class:`LakeOracle` (one per map and slip setting); the finite-horizon
table grows to the largest horizon asked for. One oracle is shared by every env instance of the
same settings (``env.build_task``), stepped from several threads when the runner has
``workers > 1``: its arrays are read-only, its memo dicts only gain entries that are pure
functions of their key (a race computes the same value twice; either store wins), and the
finite-horizon table, which is *replaced* when it grows, is one ``(q, v)`` tuple read in a
single attribute load and grown under a lock.

Scores (see ``docs/envs/frozenlake.md``) are normalised at the state: ``Q_h(s, a) / V_h(s)``,
1.0 when ``V_h(s) = 0``.
"""

from __future__ import annotations

import threading

import numpy as np

from multiturn_envs.envs.frozenlake.dynamics import N_ACTIONS, LakeDynamics

SUBOPTIMAL_EPS = 1e-9
_TOL = 1e-13
_MAX_ITERATIONS = 20_000
_DENSE_MAX_STATES = 256
_SOLVE_MAX_STATES = 1024


def _frozen(array: np.ndarray) -> np.ndarray:
    """``array`` made read-only (in place) and returned: shared tables must not be written."""
    array.flags.writeable = False
    return array


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
        rew = dynamics.reward
        cont = (~dynamics.terminated).astype(float)
        hole = (dynamics.terminated & (rew == 0)).astype(float)
        prob = dynamics.prob
        live = ~dynamics.is_terminal
        self.end_prob = _frozen(np.where(live[:, None], (prob * (1.0 - cont)).sum(axis=2), 0.0))
        self.hole_prob = _frozen(np.where(live[:, None], (prob * hole).sum(axis=2), 0.0))
        # Internally action-major, (4, n): a reduction over the 4 actions then runs along
        # contiguous rows, which numpy does several times faster than over a short last axis.
        self._next = _frozen(np.ascontiguousarray(dynamics.next_state.transpose(1, 0, 2)))
        self._continue_prob = _frozen(np.ascontiguousarray((prob * cont).transpose(1, 0, 2)))
        self._expected_reward = _frozen(np.ascontiguousarray((prob * rew).sum(axis=2).T))
        self.exact = True  # False once an infinite-horizon value had to be approximated
        self._dense: np.ndarray | None = None
        if n <= _DENSE_MAX_STATES:
            # Small maps: the backup is one (4n x n) matrix-vector product, several times
            # faster than gathering; large maps keep the O(12 n) padded gather.
            self._dense = _frozen(self._dense_matrix())
        # (Q_0..Q_H, V_0..V_H), replaced as one object when it grows (see the module doc).
        self._finite: tuple[np.ndarray, np.ndarray] = (
            _frozen(np.zeros((1, N_ACTIONS, n))),
            _frozen(np.zeros((1, n))),
        )
        self._grow_lock = threading.Lock()
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
        return self._finite_upto(h)[0][h].T

    def finite_v(self, h: int) -> np.ndarray:
        """``V_h = max_a Q_h``: the best probability of reaching the goal within ``h`` turns."""
        return self._finite_upto(h)[1][h]

    def _finite_upto(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``(Q, V)`` tables through horizon ``h`` at least (grown under the lock)."""
        if h < 0:
            raise ValueError(f"horizon must be >= 0, got {h}")
        tables = self._finite  # one load: q and v always belong together
        if h < tables[0].shape[0]:
            return tables
        with self._grow_lock:
            tables = self._finite  # another thread may have grown it meanwhile
            if h >= tables[0].shape[0]:
                tables = self._grown(tables, h)
                self._finite = tables
        return tables

    def _grown(
        self, tables: tuple[np.ndarray, np.ndarray], h: int
    ) -> tuple[np.ndarray, np.ndarray]:
        old_q, old_v = tables
        have = old_q.shape[0] - 1
        q = np.empty((h + 1, *old_q.shape[1:]))
        v = np.empty((h + 1, old_v.shape[1]))
        q[: have + 1] = old_q
        v[: have + 1] = old_v
        if self._dense is not None:
            # the same backup as _backup, written into preallocated rows
            flat = q.reshape(h + 1, -1)
            dense, reward = self._dense, self._expected_reward.reshape(-1)
            for k in range(have + 1, h + 1):
                np.matmul(dense, v[k - 1], out=flat[k])
                flat[k] += reward
                np.max(q[k], axis=0, out=v[k])
        else:
            for k in range(have + 1, h + 1):
                q[k] = self._backup(v[k - 1])
                np.max(q[k], axis=0, out=v[k])
        return _frozen(q), _frozen(v)

    def _goal_distance(self) -> np.ndarray:
        """Fewest moves from each cell to a goal along positive-probability edges (-1: never)."""
        n = self.dynamics.n_states
        predecessors: list[list[int]] = [[] for _ in range(n)]
        for s, row in enumerate(self.dynamics.outcomes):
            if not self.dynamics.is_terminal[s]:
                for entries in row:
                    for o in entries:
                        if o.prob > 0.0:
                            predecessors[o.next_state].append(s)
        dist = np.full(n, -1)
        frontier = list(np.flatnonzero(self.dynamics.is_goal))
        dist[frontier] = 0
        while frontier:
            nxt = []
            for s2 in frontier:
                for s in predecessors[s2]:
                    if dist[s] < 0:
                        dist[s] = dist[s2] + 1
                        nxt.append(s)
            frontier = nxt
        return dist

    def _initial_policy(self, dist: np.ndarray) -> np.ndarray:
        """A move per cell that can step closer to a goal (so the goal is reached w.p. > 0)."""
        policy = np.zeros(self.dynamics.n_states, dtype=np.intp)
        for s, row in enumerate(self.dynamics.outcomes):
            if dist[s] > 0:
                progress = [
                    sum(o.prob for o in entries if dist[o.next_state] == dist[s] - 1)
                    for entries in row
                ]
                policy[s] = int(np.argmax(progress))
        return policy

    def _policy_iteration(self, discount: float) -> np.ndarray | None:
        """Exact Q by policy iteration with dense linear solves, or ``None`` if it fails.

        For ``discount = 1`` (reach probability) the solve runs over the live cells that can
        reach a goal; the others have value 0. Starting from a policy that reaches the goal
        with positive probability everywhere and switching only to strictly better moves
        keeps every policy that way, so each linear system is non-singular.
        """
        n = self.dynamics.n_states
        dist = self._goal_distance()
        solve = ~self.dynamics.is_terminal
        if discount == 1.0:
            solve &= dist > 0
        idx = np.flatnonzero(solve)
        transition = self._dense_matrix().reshape(N_ACTIONS, n, n)
        policy = self._initial_policy(dist)
        cells = np.arange(n)
        for _ in range(1_000):
            p_pi = transition[policy[idx], idx][:, idx]
            r_pi = self._expected_reward[policy[idx], idx]
            v = np.zeros(n)
            try:
                v[idx] = np.linalg.solve(np.eye(len(idx)) - discount * p_pi, r_pi)
            except np.linalg.LinAlgError:
                return None
            if not np.all(np.isfinite(v)) or v.min() < -1e-9 or v.max() > 1.0 + 1e-9:
                return None  # numerically singular (probabilities of ~1e-16 and below)
            q = self._backup(v, discount)
            current = q[policy, cells]
            better = solve & (q.max(axis=0) > current + 1e-12)
            if not better.any():
                q = q.T
                q.flags.writeable = False
                return q
            policy[better] = q[:, better].argmax(axis=0)
        return None

    def _dense_matrix(self) -> np.ndarray:
        if self._dense is not None:
            return self._dense
        n = self.dynamics.n_states
        dense = np.zeros((N_ACTIONS * n, n))
        rows = np.repeat(np.arange(N_ACTIONS * n), 3)
        np.add.at(dense, (rows, self._next.reshape(-1)), self._continue_prob.reshape(-1))
        return dense

    def _iterate(self, discount: float) -> np.ndarray:
        if self.dynamics.n_states <= _SOLVE_MAX_STATES:
            q = self._policy_iteration(discount)
            if q is not None:
                return q
        v = np.zeros(self.dynamics.n_states)
        for _ in range(_MAX_ITERATIONS):
            v_new = self._backup(v, discount).max(axis=0)
            converged = np.max(np.abs(v_new - v)) < _TOL
            v = v_new
            if converged:
                break
        else:
            # Only reached with degenerate slip probabilities (~1e-16 and below) on maps
            # too large or too ill-conditioned to solve: keep the lower bound reached so far
            # (a step must never raise) and say so.
            self.exact = False
        q = self._backup(v, discount).T
        q.flags.writeable = False
        return q

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
        """An optimal move (score exactly 1.0), ties by discounted Q, then lowest action index."""
        tied = np.flatnonzero(self.scores(s, h) == 1.0)
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
