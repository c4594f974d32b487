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
Any turn budget, bounded memory and time: the finite-horizon values converge, and the oracle
uses that exactly. The backup ``f`` is monotone (non-negative weights, and float rounding is
monotone) and ``V_1 = f(0) >= 0 = V_0``, so the computed ``V_h`` never decrease and, being
bounded floats, reach a **bit-for-bit fixed point**: the first ``k`` with ``V_k == V_{k-1}``
exactly. ``f`` is a fixed sequence of float operations on its input's values (each backup reads
its input from the same scratch buffer, so memory alignment cannot change the summation
order), hence ``Q_{k+1} = f(V_k) = f(V_{k-1}) = Q_k`` and every later horizon repeats row
``k`` bit for bit: ``Q_h = Q_min(h, k)``, the very floats an unbounded table would hold. A
budget of 10**9 on the default 4x4 and 8x8 maps costs the ~1,400 / ~2,400 backups up to ``k``.

Convergence can be slow when slips are rare (success rates near 1 make the optimal policy bump
into walls on purpose, and each turn gains only the slip probability: 4x4 at 0.99 reaches its
fixed point after ~860,000 backups), so memory and time are capped too:

* the stored table holds at most ``_TABLE_BYTES`` (8 MiB) of horizons; beyond it, horizons are
  computed in blocks of the same size from checkpoints of ``V`` (one vector per block), and the
  block last used is kept (an episode asks ``h, h - 1, ...``: one block serves many turns);
* at most ``_MAX_WORK / n_states`` horizons are ever computed (2**24 cell-backups: ~1M horizons
  on a 4x4 map, a few seconds). A budget past that on a map that has not converged by then is
  answered with the values at that horizon and ``exact`` becomes False; they are within
  ``max(V* - V_cap)`` of the truth, since ``V_cap <= V_h <= V*`` (reported by
  :meth:`LakeOracle.finite_gap`).

Results are cached on the :class:`LakeOracle` (one per map and slip setting). One oracle is
shared by every env instance of the same settings (``env.build_task``), stepped from several
threads when the runner has ``workers > 1``: its arrays are read-only, the score memo is an LRU
under a lock, and the finite-horizon table, which is *replaced* when it grows, is one ``(q, v)``
tuple read in a single attribute load and grown under a lock (as are the blocks beyond it).

Scores (see ``docs/envs/frozenlake.md``) are normalised at the state: ``Q_h(s, a) / V_h(s)``,
1.0 when ``V_h(s) = 0``.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from multiturn_envs.envs.frozenlake.dynamics import N_ACTIONS, LakeDynamics

SUBOPTIMAL_EPS = 1e-9
_TOL = 1e-13
_MAX_ITERATIONS = 20_000
_DENSE_MAX_STATES = 256
_SOLVE_MAX_STATES = 1024
_TABLE_BYTES = 8 << 20
"""Memory for stored finite-horizon rows (the table, and again for the block beyond it)."""
_MAX_WORK = 1 << 24
"""Cell-backups ever spent on finite horizons of one map (see the module docstring)."""
_SCORE_TABLES = 1024
"""Score tables (one per horizon asked) kept per oracle, least recently used dropped."""


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
        self._table_rows = max(64, _TABLE_BYTES // ((N_ACTIONS + 1) * n * 8))
        self.max_horizon = max(self._table_rows, _MAX_WORK // n)
        """Horizons beyond this are answered with its values unless converged before."""
        self.fixed_horizon: int | None = None
        """The ``k`` with ``Q_h = Q_k`` for every ``h >= k`` (bit for bit), once found."""
        self._fixed_row: tuple[np.ndarray, np.ndarray] | None = None
        self._checkpoints: dict[int, np.ndarray] = {}  # V at block starts beyond the table
        self._block: tuple[int, np.ndarray, np.ndarray] | None = None  # (first h, q, v)
        self._capped = False
        self._x = np.zeros(n)  # the backup's input, always at this address (module doc)
        self._y = np.zeros(N_ACTIONS * n)
        self._score_lock = threading.Lock()
        self._score_tables: collections.OrderedDict[int | None, list[list[float]]] = (
            collections.OrderedDict()
        )
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
        result: np.ndarray = future
        return result

    def finite_q(self, h: int) -> np.ndarray:
        """``Q_h`` as an ``(n_states, 4)`` array (a read-only view); ``Q_0 = 0``."""
        q: np.ndarray = self._row(h)[0].T
        return q

    def finite_v(self, h: int) -> np.ndarray:
        """``V_h = max_a Q_h``: the best probability of reaching the goal within ``h`` turns."""
        return self._row(h)[1]

    def horizon_key(self, h: int) -> int:
        """The horizon whose values ``h`` has: ``h`` itself, or the fixed point (or the work cap)
        when ``h`` is past it. Equal keys mean bit-identical ``Q`` and ``V``."""
        fixed = self.fixed_horizon
        if fixed is not None and h > fixed:
            return fixed
        return min(h, self.max_horizon)

    def finite_gap(self) -> float:
        """A bound on how far an answered ``V_h`` can be from the true one: 0.0 unless a horizon
        past ``max_horizon`` was asked before the values converged; then ``max(V* - V_cap)``
        (the answer is ``V_cap`` and ``V_cap <= V_h <= V*``)."""
        if not self._capped or self.fixed_horizon is not None:
            return 0.0
        return float(np.max(self.reach_q().max(axis=1) - self.finite_v(self.max_horizon)))

    def _row(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        """``(Q_h, V_h)``, action-major ``(4, n)`` and ``(n,)``, read-only."""
        if h < 0:
            raise ValueError(f"horizon must be >= 0, got {h}")
        key = self.horizon_key(h)
        q, v = self._finite  # one load: q and v always belong together
        if key < q.shape[0]:
            return q[key], v[key]
        with self._grow_lock:
            q, v = self._finite  # another thread may have grown it meanwhile
            key = self.horizon_key(h)
            if self.fixed_horizon is None and q.shape[0] <= min(key, self._table_rows - 1):
                q, v = self._grown(q, v, min(key, self._table_rows - 1))
                self._finite = (q, v)
                key = self.horizon_key(h)
            row = (q[key], v[key]) if key < q.shape[0] else self._beyond_table(key)
            if h > self.max_horizon and self.fixed_horizon is None:
                self._capped = True
                self.exact = False  # answered with V_cap: see finite_gap
            return row

    def _step(self, v_prev: np.ndarray, q_out: np.ndarray, v_out: np.ndarray) -> bool:
        """One backup of ``v_prev`` into ``q_out`` / ``v_out``; True when ``v_out == v_prev``
        bit for bit (the fixed point: see the module docstring)."""
        np.copyto(self._x, v_prev)
        if self._dense is not None:
            np.matmul(self._dense, self._x, out=self._y)
            np.add(self._y, self._expected_reward.reshape(-1), out=q_out.reshape(-1))
        else:
            q_out[...] = self._backup(self._x)
        np.max(q_out, axis=0, out=v_out)
        return bool(np.array_equal(v_out, v_prev))

    def _grown(self, old_q: np.ndarray, old_v: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
        """The table through horizon ``h``, or through the fixed point if that comes first."""
        have = old_q.shape[0] - 1
        q = np.empty((h + 1, *old_q.shape[1:]))
        v = np.empty((h + 1, old_v.shape[1]))
        q[: have + 1] = old_q
        v[: have + 1] = old_v
        for k in range(have + 1, h + 1):
            if self._step(v[k - 1], q[k], v[k]):
                self._found_fixed(k, q[k], v[k])
                q, v = q[: k + 1].copy(), v[: k + 1].copy()
                break
        return _frozen(q), _frozen(v)

    def _found_fixed(self, k: int, q: np.ndarray, v: np.ndarray) -> None:
        self._fixed_row = (_frozen(q.copy()), _frozen(v.copy()))
        self.fixed_horizon = k

    def _beyond_table(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        """``(Q_h, V_h)`` past the stored table (called under the lock, ``h`` a horizon key).

        Horizons come in blocks of the table's length; the ``V`` that starts each block is
        kept as a checkpoint (one vector per block), and the block last asked for is kept
        whole, so an episode's ``h, h - 1, ...`` are lookups after the first.
        """
        fixed = self.fixed_horizon
        if self._fixed_row is not None and fixed is not None and h >= fixed:
            return self._fixed_row
        block = self._block
        if block is not None and block[0] <= h < block[0] + block[1].shape[0]:
            return block[1][h - block[0]], block[2][h - block[0]]
        top = self._finite[0].shape[0] - 1
        rows = self._table_rows
        start = top + 1 + ((h - top - 1) // rows) * rows  # the block's first horizon
        known = max((c for c in self._checkpoints if c < start), default=top)
        prev = self._checkpoints[known] if known in self._checkpoints else self._finite[1][top]
        prev = prev.copy()
        n = prev.shape[0]
        q_scratch, nxt = np.empty((N_ACTIONS, n)), np.empty(n)
        for k in range(known + 1, start):  # walk to V_{start - 1}, checkpointing
            if self._step(prev, q_scratch, nxt):
                self._found_fixed(k, q_scratch, nxt)
                return self._fixed_row  # type: ignore[return-value]
            prev, nxt = nxt, prev
            if (k - top - 1) % rows == 0:
                self._checkpoints[k] = _frozen(prev.copy())
        length = min(rows, self.max_horizon - start + 1)
        q = np.empty((length, N_ACTIONS, n))
        v = np.empty((length, n))
        for i in range(length):
            if self._step(prev, q[i], v[i]):
                self._found_fixed(start + i, q[i], v[i])
                if h >= start + i:
                    return self._fixed_row  # type: ignore[return-value]
                length = i + 1
                break
            prev = v[i]
        self._checkpoints[start] = _frozen(v[0].copy())
        self._block = (start, _frozen(q[:length].copy()), _frozen(v[:length].copy()))
        return self._block[1][h - start], self._block[2][h - start]

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
        frontier: list[int] = [int(x) for x in np.flatnonzero(self.dynamics.is_goal)]
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
                solved: np.ndarray = q.T
                solved.flags.writeable = False
                return solved
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
        approx: np.ndarray = self._backup(v, discount).T
        approx.flags.writeable = False
        return approx

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
        row: np.ndarray = self.reach_q()[s] if h is None else self.finite_q(h)[s]
        return row

    def scores(self, s: int, h: int | None) -> np.ndarray:
        """Normalised scores of the four moves: ``Q_h(s, a) / V_h(s)``, all 1.0 if ``V_h = 0``."""
        return np.asarray(self.score_table(h)[s])

    def score_table(self, h: int | None) -> list[list[float]]:
        """``scores`` for every state as nested lists (memoised per horizon key, least recently
        used dropped past ``_SCORE_TABLES``: a step is a lookup, and memory stays bounded)."""
        if h is not None:
            self._row(h)  # first, so that a fixed point it finds is in the key
        key = None if h is None else self.horizon_key(h)
        with self._score_lock:
            known = self._score_tables.get(key)
            if known is not None:
                self._score_tables.move_to_end(key)
                return known
        q = self.reach_q() if h is None else self.finite_q(h)
        table: list[list[float]] = normalise(q).tolist()
        with self._score_lock:
            self._score_tables[key] = table
            while len(self._score_tables) > _SCORE_TABLES:
                self._score_tables.popitem(last=False)
        return table

    def value(self, s: int, h: int | None) -> float:
        """``V_h(s)``: the best probability of reaching the goal from ``s`` within ``h`` turns
        (``None``: with no budget). 0 means the state is lost: no move can score anything.
        A lookup in the ``V`` row the step's score table came from (called every step)."""
        if h is None:
            return float(self.reach_q()[s].max())
        return float(self.finite_v(h)[s])

    def score(self, s: int, a: int, h: int | None) -> float:
        """Normalised score of move ``a`` at ``s`` with ``h`` turns left including this one."""
        return float(self.scores(s, h)[a])

    def noop_score(self, s: int, h: int | None) -> float:
        """Score of a turn that does not move (unparseable reply): ``V_{h-1}(s) / V_h(s)``.

        Without a budget a wasted turn loses nothing, so it scores 1.0.
        """
        if h is None:
            return 1.0
        best = self.value(s, h)
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
