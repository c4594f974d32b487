"""FrozenLake's per-task tables are shared across env instances: same results, safe to share.

The harness holds up to 64 env instances; each used to rebuild the dynamics, oracle and renderer
of every task it met (~5 ms each). ``build_task`` memoises them per process. These tests check
that sharing changes nothing observable (trajectories, scores, snapshots), that instances with
different settings never share, that nobody can write into a shared table, and that the oracle's
lazily grown tables give the same values when filled from many threads at once.
"""

from __future__ import annotations

import copy
import pickle
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.frozenlake.dynamics import ACTION_NAMES
from multiturn_envs.envs.frozenlake.env import (
    DEFAULT_TASKS,
    FrozenLakeTextEnv,
    build_task,
    clear_task_cache,
)
from multiturn_envs.envs.frozenlake.oracle import LakeOracle

TASKS = ["4x4", "8x8", DEFAULT_TASKS[0], DEFAULT_TASKS[7]]


def play(env: FrozenLakeTextEnv, task: str, seed: int, moves: list[int]) -> list[object]:
    """One episode's observable trace: observations, rewards, flags, scores, expert moves."""
    obs, info = env.reset(seed=seed, options={"task_id": task})
    trace: list[object] = [obs, info["state_key"]]
    for a in moves:
        trace.append((env.expert_action(), env.score_action(ACTION_NAMES[a])))
        obs, reward, terminated, truncated, info = env.step(ACTION_NAMES[a])
        trace.append((obs, reward, terminated, truncated, info["step_score"], info["cell"]))
        if terminated or truncated:
            break
    return trace


def test_instances_with_equal_settings_share_one_task() -> None:
    a, b = FrozenLakeTextEnv(max_turns=5), FrozenLakeTextEnv(max_turns=9)
    a.reset(seed=0, options={"task_id": "8x8"})
    b.reset(seed=1, options={"task_id": "8x8"})
    assert a.oracle is b.oracle and a.dynamics is b.dynamics  # the budget is not a setting


@pytest.mark.parametrize(
    "kwargs",
    [
        {"is_slippery": False},
        {"success_rate": 0.5},
        {"gamma": 0.9},
        {"separator": " "},
        {"observation": "compact"},
        {"glyphs": {"player": "@"}},
    ],
)
def test_instances_with_other_settings_never_share(kwargs: dict[str, object]) -> None:
    plain, other = FrozenLakeTextEnv(), FrozenLakeTextEnv(**kwargs)  # type: ignore[arg-type]
    obs_plain, _ = plain.reset(seed=0, options={"task_id": "4x4"})
    obs_other, _ = other.reset(seed=0, options={"task_id": "4x4"})
    assert plain.oracle is not other.oracle
    if {"separator", "glyphs", "observation"} & set(kwargs):
        assert obs_plain != obs_other


def test_glyph_order_does_not_split_the_cache() -> None:
    a = FrozenLakeTextEnv(glyphs={"player": "@", "hole": "#"})
    b = FrozenLakeTextEnv(glyphs={"hole": "#", "player": "@"})
    a.reset(seed=0, options={"task_id": "4x4"})
    b.reset(seed=0, options={"task_id": "4x4"})
    assert a.oracle is b.oracle


def test_shared_tables_are_read_only() -> None:
    env = FrozenLakeTextEnv()
    env.reset(seed=0, options={"task_id": "4x4"})
    d, o = env.dynamics, env.oracle
    for array in (d.prob, d.next_state, d.reward, d.terminated, d.is_hole, d.is_goal):
        with pytest.raises(ValueError, match="read-only"):
            array.flat[0] = array.flat[0]
    for array in (o.finite_q(8), o.finite_v(8), o.end_prob, o.hole_prob, o.reach_q()):
        with pytest.raises(ValueError, match="read-only"):
            array.flat[0] = 0.5


@settings(max_examples=25, deadline=None)
@given(
    task=st.sampled_from(TASKS),
    seeds=st.tuples(st.integers(0, 2**31), st.integers(0, 2**31)),
    moves=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    budget=st.integers(1, 12),
)
def test_sharing_changes_no_trajectory(
    task: str, seeds: tuple[int, int], moves: list[int], budget: int
) -> None:
    # Reference: each episode alone on a fresh instance with nothing cached.
    alone = []
    for seed in seeds:
        clear_task_cache()
        alone.append(play(FrozenLakeTextEnv(max_turns=budget), task, seed, moves))
    # Shared: two live instances on the same (warm) task, plus a third that ran another task.
    clear_task_cache()
    other = FrozenLakeTextEnv(max_turns=3)
    play(other, "8x8" if task != "8x8" else "4x4", 5, [2, 1, 2])
    a, b = FrozenLakeTextEnv(max_turns=budget), FrozenLakeTextEnv(max_turns=budget)
    assert play(a, task, seeds[0], moves) == alone[0]
    assert play(b, task, seeds[1], moves) == alone[1]
    assert play(a, task, seeds[1], moves) == alone[1]


def test_snapshot_restores_onto_an_instance_that_never_saw_the_task() -> None:
    a, b = FrozenLakeTextEnv(max_turns=8), FrozenLakeTextEnv(max_turns=8)
    a.reset(seed=3, options={"task_id": "8x8"})
    a.step("Right")
    b.reset(seed=0, options={"task_id": "4x4"})
    b.set_state(a.get_state())
    assert b.cell == a.cell and b.desc == a.desc
    assert b.step("Down")[0] == a.step("Down")[0]


def test_deepcopy_and_pickle_share_or_rebuild_the_task() -> None:
    env = FrozenLakeTextEnv(max_turns=8, success_rate=0.5)
    env.reset(seed=4, options={"task_id": DEFAULT_TASKS[2]})
    twin = copy.deepcopy(env)
    assert twin.oracle is env.oracle  # immutable in meaning: shared, not copied
    assert twin.step("Left")[0] == env.step("Left")[0]
    clear_task_cache()
    revived = pickle.loads(pickle.dumps(twin))
    assert revived.dynamics.success_rate == 0.5
    assert revived.desc == env.desc
    np.testing.assert_array_equal(revived.oracle.finite_q(7), env.oracle.finite_q(7))


def test_cache_is_bounded() -> None:
    clear_task_cache()
    for seed in range(300):
        build_task(f"random-s3-p0.8-n{seed}", True, 1 / 3, 0.99, "", None)
    info = build_task.cache_info()
    assert info.currsize == info.maxsize < 300


def race(oracle: LakeOracle, reference: LakeOracle, horizons: list[int], n: int) -> None:
    """``n`` threads ask ``oracle`` for every horizon at once, each starting elsewhere."""
    n_states = reference.dynamics.n_states
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def worker(offset: int) -> None:
        try:
            start.wait()
            for h in horizons[offset:] + horizons[:offset]:
                np.testing.assert_array_equal(oracle.finite_q(h), reference.finite_q(h))
                np.testing.assert_array_equal(oracle.finite_v(h), reference.finite_v(h))
                got = [oracle.noop_score(s, h) for s in range(n_states)]
                assert got == [reference.noop_score(s, h) for s in range(n_states)]
                assert oracle.score_table(h) == reference.score_table(h)
        except BaseException as exc:  # reported below, in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(7 * i,)) for i in range(n)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]


@pytest.mark.parametrize("task", ["8x8", DEFAULT_TASKS[5]])
def test_oracle_tables_grown_from_many_threads_agree(task: str) -> None:
    env = FrozenLakeTextEnv()
    env.reset(seed=0, options={"task_id": task})
    reference = LakeOracle(env.dynamics)
    horizons = list(range(1, 60))
    for h in horizons:
        reference.score_table(h)  # filled single-threaded first
    for _ in range(3):
        race(LakeOracle(env.dynamics), reference, horizons, 8)  # a fresh oracle each time
