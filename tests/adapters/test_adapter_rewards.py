"""Every adapter pays a registered reward (docs/rewards.md), the same definition everywhere.

The server's per-step reward (a reset's ``reward``), SkyRL's per-step reward (``reward=``),
verl's ``reward_score`` and TRL's ``get_reward``, each against the registry's own credits and
score of the same episode, played on the real env.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_openenv_server import GUESS, Socket, code_of, thread_server

from multiturn_envs.rewards import Episode, Process, Turn, make_reward
from multiturn_envs.server import protocol as p
from multiturn_envs.server.app import create_app
from multiturn_envs.testing import GuessEnv

MOVES = ["guess 7", "nonsense", "guess 11", "guess 12"]  # secret 12: solved at turn 4 of 6


def _local(reward: str, **params: Any) -> tuple[list[float], float]:
    """The registry's credits and score of the episode ``MOVES`` plays, in-process."""
    env = GuessEnv(max_turns=6)
    _, start = env.reset(seed=0, options={"task_id": "secret-12"})
    turns = []
    for move in MOVES:
        _, r, te, tr, info = env.step(move)
        turns.append(Turn(r, info, te, tr))
    episode = Episode(start, tuple(turns))
    made = make_reward(reward, **params)
    return made.credits(episode), made.score(episode)


def test_the_server_pays_each_step_with_the_reward_a_reset_names() -> None:
    with thread_server(create_app("Probe", make_env=GUESS)) as url:
        s = Socket(url)
        try:
            for spec in ("outcome", {"name": "process", "weight": 0.5}, "success", None):
                data: dict[str, Any] = {"seed": 0, "task_id": "secret-12"}
                if spec is not None:
                    data["reward"] = spec
                assert s.send({"type": "reset", "data": data})["type"] == "observation"
                paid, env_rewards = [], []
                for move in MOVES:
                    reply = s.send({"type": "step", "data": {"text": move}})["data"]
                    paid.append(reply["reward"])
                    env_rewards.append(reply["observation"]["metadata"].get("env_reward"))
                name = "outcome" if spec is None else make_reward(spec).name
                params = {"weight": 0.5} if name == "process" else {}
                credits, score = _local(name, **params)
                assert paid == credits and sum(paid) == pytest.approx(score)
                if name == "outcome":  # the default payload is what it always was
                    assert env_rewards == [None] * len(MOVES)
                else:
                    assert env_rewards == [0.0, 0.0, 0.0, 1.0]
            huge = {"name": "process", "weight": 10**1000}
            for bad in (
                "best",
                {"name": "process", "weight": -1},
                {"weight": 1},
                ["process"],
                huge,
            ):
                reply = s.send({"type": "reset", "data": {"reward": bad}})
                assert code_of(reply) == p.VALIDATION_ERROR
        finally:
            s.close()


def test_skyrl_pays_the_process_reward_when_asked() -> None:
    import skyrl_gym

    from multiturn_envs.adapters.skyrl import MTSkyRLEnv

    env = MTSkyRLEnv(
        extras={"task_id": "secret-12", "seed": 0, "mt_max_turns": 6},
        env_id="MTTest/GuessReward-v0",
        reward={"name": "process", "weight": 0.5},
    )
    env.init([])
    paid = [env.step(move)["reward"] for move in MOVES]
    credits, score = _local("process", weight=0.5)
    assert paid == credits and env.get_metrics()["return"] == pytest.approx(score)
    env.close()
    assert skyrl_gym  # the adapter's module imported SkyRL's own base class


def test_verl_reward_score_is_the_named_rewards_score(tiny_dir: Any) -> None:
    """The replies are scripted (the point is the reward, not the model); tokens are real."""
    from multiturn_envs.adapters.verl import run_episode
    from multiturn_envs.testing.tiny_lm import load_tiny_chat_model

    _, tokenizer = load_tiny_chat_model(tiny_dir)

    async def generate(prompt_ids: list[int], seed: int) -> tuple[list[int], None]:
        return tokenizer.encode(next(replies), add_special_tokens=False), None

    for reward in ("outcome", "process", {"name": "process", "weight": 1.0}):
        replies = iter(MOVES)
        tokens = asyncio.run(
            run_episode(
                GuessEnv(max_turns=6),
                tokenizer,
                generate,
                task_id="secret-12",
                seed=0,
                reward=reward,
                extractor=lambda text: text.strip(),
            )
        )
        made = make_reward(reward)
        _, score = _local(made.name, **made.params())
        assert tokens.extra_fields["turns"] == len(MOVES)
        assert tokens.reward_score == score
    assert Process().score(Episode({})) == 0.0


@pytest.fixture(scope="module", autouse=True)
def _registered() -> Any:
    import gymnasium as gym

    gym.register("MTTest/GuessReward-v0", entry_point=GuessEnv, max_episode_steps=None)
    yield
    del gym.registry["MTTest/GuessReward-v0"]
