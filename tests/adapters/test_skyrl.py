"""SkyRL-gym adapter through skyrl_gym's own ``make``/``init``/``step`` on every registered env."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv
from test_openenv_client import env_kwargs_for

import multiturn_envs
from multiturn_envs.adapters.skyrl import MTSkyRLEnv, register_skyrl_envs


@pytest.mark.parametrize("env_id", multiturn_envs.env_ids())
def test_skyrl_make_init_step_matches_the_gym_env(env_id: str) -> None:
    assert env_id in register_skyrl_envs()
    assert register_skyrl_envs() == multiturn_envs.env_ids()  # idempotent
    env_kwargs = env_kwargs_for(env_id)
    twin = gym.make(env_id, disable_env_checker=True, max_turns=3, **env_kwargs)
    task = str(twin.unwrapped.task_ids()[2])
    # SkyRL's generator: the row's columns go to extras, and it overwrites max_turns
    extras = {"task_id": task, "seed": 4, "mt_max_turns": 3, "max_turns": 1, "reward_spec": {}}
    env = skyrl_gym.make(env_id, env_config={}, extras=extras, env_kwargs=env_kwargs)
    try:
        assert isinstance(env, BaseTextEnv) and isinstance(env, MTSkyRLEnv)
        prompt = [{"role": "system", "content": "sys"}, {"role": "user", "content": ""}]
        conversation, info = env.init(prompt)
        obs, _ = twin.reset(seed=4, options={"task_id": task})
        assert conversation == [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": obs},
        ]
        assert info["task_id"] == task and env.max_turns == 3
        rng = np.random.default_rng(0)
        done, outputs, expected = False, [], []
        while not done:
            base = env.base
            action = base.random_action(rng) if not outputs else base.expert_action()
            out = env.step(action)
            o, r, term, trunc, i = twin.step(action)
            outputs.append(out)
            expected.append((o, r, term or trunc, i))
            done = out["done"]
        assert len(outputs) <= 3
        for out, (o, r, d, i) in zip(outputs, expected):
            assert out["reward"] == r and out["done"] == d
            assert out["metadata"]["step_score"] == i["step_score"]
            assert out["observations"] == ([] if d else [{"role": "user", "content": o}])
            assert out["metadata"]["observation"] == o
        metrics = env.get_metrics()
        assert metrics["turns"] == len(outputs)
        assert metrics["success"] == float(bool(expected[-1][3]["success"]))
        aggregated: dict[str, Any] = MTSkyRLEnv.aggregate_metrics([metrics, metrics])
        assert aggregated["turns"] == len(outputs)
    finally:
        env.close()
        twin.close()


def test_process_reward_and_empty_prompts() -> None:
    register_skyrl_envs()
    env = skyrl_gym.make(
        "MT/FrozenLake-v0",
        extras={"task_id": "4x4", "seed": 0},
        reward={"name": "shaped", "weight": 0.5},
    )
    conversation, _ = env.init([])
    system = env.base.system_prompt()
    assert conversation[0] == {"role": "system", "content": system}
    assert conversation[-1]["role"] == "user"
    out = env.step(env.base.expert_action())
    assert out["reward"] == pytest.approx(0.5 * out["metadata"]["step_score"] + 0.0)
    env.close()


def test_tools_and_per_step_registry_credit_through_skyrl_gym() -> None:
    """With tools, the prompt carries the env's tool schemas, each LLM reply's Hermes calls are
    the action (observations come back as tool responses), each step's reward is that turn's
    credit under the registered reward (summing to its score), and a reply without a call
    ends the episode."""
    from multiturn_envs.rewards import Episode, Turn, make_reward
    from multiturn_envs.tools import ToolCall

    register_skyrl_envs()
    extras = {"task_id": "4x4", "seed": 0, "mt_max_turns": 6, "tools": True}
    env = skyrl_gym.make(
        "MT/FrozenLake-v0",
        env_config={},
        extras=extras,
        env_kwargs={"is_slippery": False},
        reward="process",
    )
    twin = gym.make("MT/FrozenLake-v0", max_turns=6, is_slippery=False, disable_env_checker=True)
    try:
        conversation, _ = env.init([])
        assert conversation[0]["role"] == "system"
        assert "<tools>" in conversation[0]["content"] and "move tool" in conversation[0]["content"]
        _, start = twin.reset(seed=0, options={"task_id": "4x4"})
        turns = []
        rewards = []
        for move in ("Down", "Down"):
            reply = f"Going {move}.\n" + ToolCall("move", {"direction": move}).text()
            out = env.step(reply)
            o, r, term, trunc, i = twin.step(ToolCall("move", {"direction": move}))
            turns.append(Turn(float(r), i, term, trunc))
            rewards.append(out["reward"])
            assert out["observations"] == [
                {"role": "user", "content": f"<tool_response>\n{o}\n</tool_response>"}
            ]
        bad = env.step('<tool_call>{"name": "move", "arguments": {"direction": 4}}</tool_call>')
        assert bad["metadata"]["parse_error"] and not bad["done"]
        o, r, term, trunc, i = twin.step(
            '<tool_call>{"name": "move", "arguments": {"direction": 4}}</tool_call>'
        )
        turns.append(Turn(float(r), i, term, trunc))
        rewards.append(bad["reward"])
        process = make_reward("process")
        assert rewards == pytest.approx(process.credits(Episode(start, tuple(turns))))
        stop = env.step("That is all.")
        assert stop["done"] and stop["reward"] == 0.0 and stop["metadata"]["agent_stopped"]
        assert env.get_metrics()["agent_stopped"] == 1.0 and env.get_metrics()["turns"] == 3
    finally:
        env.close()
        twin.close()
