"""Every env passes Gymnasium's ``check_env`` without a warning, survives ``copy.deepcopy`` and
pickling after ``reset`` (or refuses with the documented error), and runs in Gymnasium's
async vector env (worker processes) where it can be pickled."""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import load_env_creator
from gymnasium.utils.env_checker import check_env

import multiturn_envs
from multiturn_envs.core import TextEnv
from multiturn_envs.testing import require

ENV_IDS = sorted(i for i in gym.registry if i.startswith("MT/"))
LIGHT = {"MT/FrozenLake-v0": "4x4", "MT/BFCL-v0": None, "MT/InterCode-SQL-v0": None}
"""Envs that run without Docker (their first task where None)."""


def _needs(env_id: str) -> None:
    if env_id == "MT/DeepCoder-v0":
        from multiturn_envs.sandbox.engine import docker_unavailable

        problem = docker_unavailable()
        require(problem is None, f"Docker with the sandbox image ({problem})")
    elif env_id == "MT/Terminal-v0":
        from multiturn_envs.sandbox.terminal_image import terminal_unavailable

        problem = terminal_unavailable()
        require(problem is None, f"Docker with the terminal image ({problem})")
    elif env_id == "MT/InterCode-SQL-v0":
        import importlib.util

        require(importlib.util.find_spec("sqlglot") is not None, "the [sql] extra (sqlglot)")


@pytest.fixture(params=ENV_IDS)
def env(request: pytest.FixtureRequest) -> Iterator[gym.Env[str, str]]:
    _needs(request.param)
    made = gym.make(request.param, max_turns=4)
    yield made
    made.close()


def test_every_registered_env_is_checked_here() -> None:
    assert sorted(multiturn_envs.env_ids()) == ENV_IDS


def test_check_env_passes_without_a_warning(env: gym.Env[str, str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    assert env.metadata["render_fps"] == 4


def _first_action(base: TextEnv) -> str:
    return str(base.expert_action())


def test_copies_after_reset_play_on_or_refuse_clearly(env: gym.Env[str, str]) -> None:
    base = env.unwrapped
    assert isinstance(base, TextEnv)
    env.reset(seed=3)
    action = _first_action(base)
    copies = {
        "deep-copied": (base.not_copyable, lambda: copy.deepcopy(env)),
        "pickled": (base.not_picklable, lambda: pickle.loads(pickle.dumps(env))),
    }
    for what, (refusal, make_copy) in copies.items():
        if refusal is not None:
            with pytest.raises(TypeError) as info:
                make_copy()
            message = str(info.value)
            assert what in message and refusal in message
            assert "set_state(get_state())" in message
            continue
        twin = make_copy()
        try:
            assert twin.unwrapped.messages() == base.messages()
            stepped = twin.step(action)
            assert base.turn == 0  # the copy is its own episode
            again = env.step(action)
            assert stepped[:4] == again[:4]
            assert twin.unwrapped.messages() == base.messages()
            env.reset(seed=3)
        finally:
            twin.close()


def _refuses_pickling(env_id: str) -> bool:
    entry = gym.registry[env_id].entry_point
    cls = load_env_creator(entry) if isinstance(entry, str) else entry
    return getattr(cls, "not_picklable", None) is not None


REFUSE_PICKLING = [i for i in ENV_IDS if _refuses_pickling(i)]
"""The envs that refuse pickling (a container, a connection): they branch by state instead."""


@pytest.mark.parametrize("env_id", REFUSE_PICKLING)
def test_an_env_that_refuses_pickling_still_branches_with_set_state(env_id: str) -> None:
    _needs(env_id)
    env = gym.make(env_id, max_turns=4)
    other = gym.make(env_id, max_turns=4)
    try:
        base = env.unwrapped
        assert isinstance(base, TextEnv) and base.not_picklable is not None
        env.reset(seed=1)
        state = base.get_state()
        other.reset(seed=1)
        other.unwrapped.set_state(state)  # type: ignore[attr-defined]
        action = _first_action(base)
        assert other.step(action)[:4] == env.step(action)[:4]
    finally:
        other.close()
        env.close()


def test_async_vector_env_runs_episodes_in_worker_processes() -> None:
    """docs/env-contract.md shows this: FrozenLake in Gymnasium's AsyncVectorEnv (each env in
    its own process, so it must pickle). A string space has no shared-memory buffer: the
    observations travel through the pipes (``shared_memory=False``)."""
    envs = gym.make_vec(
        "MT/FrozenLake-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"shared_memory": False},
        max_turns=4,
    )
    try:
        observations, infos = envs.reset(seed=[0, 1], options={"task_id": "4x4"})
        assert len(observations) == 2 and all(isinstance(o, str) for o in observations)
        assert list(infos["task_id"]) == ["4x4", "4x4"]
        observations, rewards, terminated, _, infos = envs.step(
            ["<answer>Down</answer>", "<answer>Right</answer>"]
        )
        assert rewards.shape == (2,) and terminated.dtype == np.bool_
        assert list(infos["turn"]) == [1, 1]
    finally:
        envs.close()
