"""DP oracle on Gymnasium's 8x8 map with a 100-turn horizon: median time, target < 5 ms.

Times a cold start, as the env meets a new task: build the oracle from the transition model
and compute ``Q_h`` for every ``h <= 100`` (slippery, success rate 1/3). Prints the median
over repeats, its ratio to the 5 ms budget (``5 ms / median``, required >= 1.0), and, as the
anchor measured in the same run, the plain-Python loop over Gymnasium's ``P`` from the field
notes (``ratio = anchor / ours``).

Run: ``.venv/bin/python benchmarks/bench_frozenlake_oracle.py [--repeats N]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

from multiturn_envs.envs.frozenlake.dynamics import LakeDynamics
from multiturn_envs.envs.frozenlake.maps import STANDARD_MAPS
from multiturn_envs.envs.frozenlake.oracle import LakeOracle

HORIZON = 100
BUDGET_S = 0.005


def plain_finite_horizon_q(P: dict, n_states: int, H: int) -> list[np.ndarray]:
    """The field notes' reference: Python loops over ``P`` (the anchor)."""
    V, Qs = np.zeros(n_states), []
    for _ in range(H):
        Q = np.array(
            [
                [sum(p * (r + (0.0 if d else V[s2])) for p, s2, r, d in P[s][a]) for a in range(4)]
                for s in range(n_states)
            ]
        )
        V = Q.max(axis=1)
        Qs.append(Q)
    return Qs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    dynamics = LakeDynamics(STANDARD_MAPS["8x8"], True, 1.0 / 3.0)
    P = FrozenLakeEnv(map_name="8x8").P
    ours, anchor = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        q = LakeOracle(dynamics).finite_q(HORIZON)
        ours.append(time.perf_counter() - t0)
    for _ in range(max(3, args.repeats // 10)):
        t0 = time.perf_counter()
        reference = plain_finite_horizon_q(P, dynamics.n_states, HORIZON)[-1]
        anchor.append(time.perf_counter() - t0)
    assert np.allclose(q, reference, atol=1e-12), "DP and reference disagree"
    median, anchor_median = statistics.median(ours), statistics.median(anchor)
    print(f"ours: median {median * 1e3:.2f} ms (8x8 slippery, H={HORIZON}, cold start)")
    print(
        f"ratio to the 5 ms budget = {BUDGET_S / median:.2f} (required >= 1.0): "
        f"{'PASS' if median < BUDGET_S else 'FAIL'}"
    )
    print(
        f"anchor plain-Python DP over Gymnasium's P: median {anchor_median * 1e3:.1f} ms, "
        f"ratio anchor/ours = {anchor_median / median:.1f}"
    )


if __name__ == "__main__":
    main()
