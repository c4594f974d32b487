"""Every edge reads a row or a payload the same way (issue 33): one reader, one vocabulary.

The same episode fields through TRL's ``reset(**row)``, SkyRL's extras and the server's reset
payload start the same episode; a field only one edge read before (a row's reward, SkyRL's
budget mode, error injection) now works at each.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

import multiturn_envs  # noqa: F401
from multiturn_envs.episode import EpisodeStart, make_env
from multiturn_envs.testing import require

ROW = {"task_id": "4x4", "seed": 3, "max_turns": 4, "budget_mode": "announced", "error_after": 1}
"""An episode every edge can start: an announced budget of 4, after one injected error."""


def _need(name: str) -> None:
    require(importlib.util.find_spec(name) is not None, f"the Python package {name!r}")


def _local() -> tuple[str, dict[str, Any]]:
    env = make_env("MT/FrozenLake-v0", {"is_slippery": False})
    observation, info = EpisodeStart.from_row(ROW).reset(env)
    env.close()
    return observation, info


def test_trl_starts_the_row_s_episode_and_scores_with_the_row_s_reward() -> None:
    _need("trl")
    from multiturn_envs.adapters.trl import TRLEnvironment

    want, info = _local()
    env = TRLEnvironment("MT/FrozenLake-v0", is_slippery=False)
    assert env.reset(**ROW, prompt=[]) == want
    assert env.infos[0]["injected_actions"] == info["injected_actions"]
    assert env.log.seed == 3 and env.reward.name == "outcome"
    env.reset(**ROW, reward={"name": "process", "weight": 0.2})
    assert env.reward.spec() == {"name": "process", "weight": 0.2}
    env.reset(**ROW)  # the next row without one: the environment's own again
    assert env.reward.name == "outcome"
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        env.reset(task_id="4x4", seed=-2)


def test_skyrl_reads_the_same_row_with_its_own_max_turns_left_alone() -> None:
    _need("skyrl_gym")
    from multiturn_envs.adapters.skyrl import MTSkyRLEnv

    want, _ = _local()
    extras = {**ROW, "max_turns": 1, "mt_max_turns": 4}  # max_turns: SkyRL's generator cap
    env = MTSkyRLEnv({}, extras, env_id="MT/FrozenLake-v0", env_kwargs={"is_slippery": False})
    conversation, info = env.init([])
    assert conversation[-1]["content"] == want and env.max_turns == 4
    assert info["max_turns"] == 4 and info["budget_mode"] == "announced"
    env.close()


def test_the_server_starts_the_same_episode_from_a_payload() -> None:
    from multiturn_envs.server import protocol as p
    from multiturn_envs.server.session import EnvSession

    want, info = _local()
    env = make_env("MT/FrozenLake-v0", {"is_slippery": False})
    session = EnvSession(env, "MT/FrozenLake-v0", p.ServerLimits(), salt=b"0123456789abcdef")
    payload = session.reset(dict(ROW))
    assert payload["observation"]["text"] == want
    assert payload["observation"]["metadata"]["injected_actions"] == info["injected_actions"]
    assert "ignored_reset_keys" not in payload["observation"]["metadata"]
    for bad, match in [({"error_after": -1}, "error_after"), ({"seed": 2**200}, "below")]:
        with pytest.raises(p.ProtocolError, match=match):
            session.reset(bad)
    session.close()
