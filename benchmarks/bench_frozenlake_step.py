"""FrozenLake-text step vs Gymnasium's FrozenLake-v1 step + ansi render, measured in one run.

Both sides play the same map (Gymnasium's 8x8, slippery), the same seeds and the same move
sequences; an episode restarts (reset, not timed) whenever it ends. Ours: parse the reply, move
(one draw from the same generator), render the text observation, build the contract's info.
Anchor: ``FrozenLakeEnv.step(a)`` followed by ``render()`` in ``ansi`` mode (the raw env, no
wrappers, which is the fastest Gymnasium can do). Prints steps per second of both and
``ratio = ours / anchor`` (required: >= 1.0), for bare move words and for tagged replies.

Run: ``.venv/bin/python benchmarks/bench_frozenlake_step.py [--steps N] [--repeats R]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

from multiturn_envs.envs.frozenlake.dynamics import ACTION_NAMES
from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv


def _actions(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 4, size=n).tolist()


def time_gymnasium(actions: list[int]) -> float:
    """Seconds for ``len(actions)`` steps + ansi renders of Gymnasium's env (resets excluded)."""
    env = FrozenLakeEnv(render_mode="ansi", map_name="8x8", is_slippery=True)
    env.reset(seed=0)
    step, render = env.step, env.render
    elapsed, episode = 0.0, 0
    clock = time.perf_counter
    for a in actions:
        t0 = clock()
        _, _, terminated, _, _ = step(a)
        render()
        elapsed += clock() - t0
        if terminated:
            episode += 1
            env.reset(seed=episode)
    return elapsed


def time_ours(replies: list[str]) -> float:
    """Seconds for ``len(replies)`` steps of FrozenLake-text (resets excluded)."""
    env = FrozenLakeTextEnv(tasks=["8x8"], is_slippery=True)
    env.reset(seed=0, options={"task_id": "8x8"})
    step = env.step
    elapsed, episode = 0.0, 0
    clock = time.perf_counter
    for reply in replies:
        t0 = clock()
        _, _, terminated, _, _ = step(reply)
        elapsed += clock() - t0
        if terminated:
            episode += 1
            env.reset(seed=episode, options={"task_id": "8x8"})
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    actions = _actions(args.steps, seed=0)
    formats = {
        "bare word ('Right')": [ACTION_NAMES[a] for a in actions],
        "tagged ('<think>..</think><answer>Right</answer>')": [
            f"<think>I go {ACTION_NAMES[a].lower()}.</think><answer>{ACTION_NAMES[a]}</answer>"
            for a in actions
        ],
    }
    # Interleaved: each repeat times the anchor and then ours back to back, so that load on
    # a shared machine hits both alike; the ratio is taken per repeat, then the median.
    anchor_times: list[float] = []
    ours_times: dict[str, list[float]] = {label: [] for label in formats}
    ratios: dict[str, list[float]] = {label: [] for label in formats}
    for _ in range(args.repeats):
        for label, replies in formats.items():
            anchor = time_gymnasium(actions)
            ours = time_ours(replies)
            anchor_times.append(anchor)
            ours_times[label].append(ours)
            ratios[label].append(anchor / ours)
    anchor_rate = args.steps / statistics.median(anchor_times)
    print(f"anchor gymnasium FrozenLake-v1 step+ansi render: {anchor_rate:,.0f} steps/s")
    worst = float("inf")
    for label in formats:
        rate = args.steps / statistics.median(ours_times[label])
        ratio = statistics.median(ratios[label])
        worst = min(worst, ratio)
        print(f"ours, {label}: {rate:,.0f} steps/s  ratio vs anchor = {ratio:.2f}")
    print(f"min ratio = {worst:.2f} (required >= 1.0): {'PASS' if worst >= 1.0 else 'FAIL'}")


if __name__ == "__main__":
    main()
