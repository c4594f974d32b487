"""Hypothesis properties of whole episodes: budget, determinism, terminal cells, error states."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.frozenlake.env import FrozenLakeTextEnv
from multiturn_envs.wrappers.error_injection import ErrorInjection

TASKS = st.sampled_from(["4x4", "8x8", "random-s6-p0.7-n4", "map:SFH/FFG", "map:SH/FG"])
REPLIES = st.one_of(
    st.sampled_from(["Left", "Down", "Right", "Up", "<answer>down</answer>", "hm", "Left Up"]),
    st.text(max_size=20),
)


def _play(env: FrozenLakeTextEnv, seed: int, task: str, replies: list[str]) -> list[tuple]:
    out: list[tuple] = [env.reset(seed=seed, options={"task_id": task})]
    for reply in replies:
        if env.done:
            break
        out.append(env.step(reply))
    return out


@settings(max_examples=40)
@given(TASKS, st.booleans(), st.integers(1, 12), st.integers(0, 2**31), st.lists(REPLIES))
def test_budget_never_exceeded_and_flags_consistent(
    task: str, slippery: bool, budget: int, seed: int, replies: list[str]
) -> None:
    env = FrozenLakeTextEnv(max_turns=budget, is_slippery=slippery)
    steps = _play(env, seed, task, replies)[1:]
    assert len(steps) <= budget
    for k, (_, reward, terminated, truncated, info) in enumerate(steps, start=1):
        assert info["turn"] == k and info["turns_left"] == budget - k
        assert not (terminated and truncated)
        assert truncated == (k == budget and not terminated)
        assert (reward == 1.0) == info["success"] == (info["event"] == "reached_goal")
        assert terminated == (info["event"] in ("reached_goal", "fell_in_hole"))
        if terminated or truncated:
            assert k == len(steps)


@settings(max_examples=30)
@given(TASKS, st.booleans(), st.integers(0, 2**31), st.lists(REPLIES, max_size=15))
def test_same_seed_same_trajectory(
    task: str, slippery: bool, seed: int, replies: list[str]
) -> None:
    a = _play(FrozenLakeTextEnv(max_turns=15, is_slippery=slippery), seed, task, replies)
    b = _play(FrozenLakeTextEnv(max_turns=15, is_slippery=slippery), seed, task, replies)
    assert a == b


@settings(max_examples=30)
@given(TASKS, st.booleans(), st.sampled_from(["", " "]), st.integers(0, 2**31), st.lists(REPLIES))
def test_compact_observation_changes_only_the_text(
    task: str, slippery: bool, separator: str, seed: int, replies: list[str]
) -> None:
    """Same dynamics, infos and oracle; the text is the full observation's grid (plus a parse
    error's reason), and it shows the agent where ``info["cell"]`` says."""
    kwargs = {"max_turns": 12, "is_slippery": slippery, "separator": separator}
    full_env = FrozenLakeTextEnv(**kwargs)  # type: ignore[arg-type]
    compact_env = FrozenLakeTextEnv(observation="compact", **kwargs)  # type: ignore[arg-type]
    full = _play(full_env, seed, task, replies)
    compact = [compact_env.reset(seed=seed, options={"task_id": task})]
    renderer = compact_env._task_for(task).renderer
    grid = renderer.grid(compact_env.cell)
    rules = full[0][0].split("\n\n")[0]
    assert compact[0][0] == f"{rules}\n{renderer.legend}\n\n{grid}" and grid in full[0][0]
    for reply in replies[: len(full) - 1]:
        step = compact_env.step(reply)
        compact.append(step)
        obs, info = step[0], step[-1]
        grid = renderer.grid(info["cell"])
        assert grid in full[len(compact) - 1][0]
        if info["parse_error"]:
            assert obs == f"{info['error_message']} You did not move.\n{grid}"
        else:
            assert obs == grid
    assert [s[1:] for s in full] == [s[1:] for s in compact]


@settings(max_examples=30)
@given(TASKS, st.integers(0, 2**31), st.lists(st.sampled_from(["Left", "Down", "Right", "Up"])))
def test_episode_ends_exactly_on_holes_and_goals(task: str, seed: int, moves: list[str]) -> None:
    env = FrozenLakeTextEnv(is_slippery=True)
    env.reset(seed=seed, options={"task_id": task})
    for move in moves:
        if env.done:
            break
        _, _, terminated, _, info = env.step(move)
        row, col = divmod(info["cell"], len(env.desc[0]))
        assert terminated == (env.desc[row][col] in "HG")


@settings(max_examples=20)
@given(st.sampled_from(["8x8", "random-s6-p0.8-n1"]), st.integers(0, 3), st.integers(0, 2**31))
def test_error_injection_starts_in_a_live_error_state(task: str, k: int, seed: int) -> None:
    env = ErrorInjection(FrozenLakeTextEnv(max_turns=30, is_slippery=False), after_expert_steps=k)
    _, info = env.reset(seed=seed, options={"task_id": task})
    base = env.unwrapped
    assert not base.done and info["prefix_turns"] == k + 1 and info["turns_left"] == 30
    assert len(base.messages()) == 1 + 2 * (k + 1)
    assert base.score_action(base.expert_action()) == 1.0
    rng = np.random.default_rng(seed)
    assert not env.step(base.error_action(rng))[2]
