"""The rewards registry changed no number: every consumer gives what the code before it gave.

``data/reward_golden.json`` was computed with the code of commit 7d4706a, before rewards had a
registry and the advantage estimator its own field (the generator was this module's
``play``/``rollout_figures`` driving the old API: ``environment(config)``, ``trajectory_of(env,
config.gigpo_step_reward)`` and ``gigpo_advantages`` per group, the ``ProcessReward`` wrapper,
SkyRL's ``step_score_weight`` and the verifiers rubric). Here the same episodes are played with
today's code, from the same *old-vocabulary* configs (``"reward": "gigpo"``,
``"gigpo_step_reward": "step_score"``), and every figure must be equal bit for bit: the
trainer's rollout rewards, process scores, step credits, GiGPO step returns and per-turn
advantages, the wrapper's shaped rewards, SkyRL's per-step rewards and the verifiers rubric.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import multiturn_envs  # noqa: F401
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.testing import require_packages
from multiturn_envs.wrappers import ProcessReward

GOLDEN = json.loads((Path(__file__).parent / "data" / "reward_golden.json").read_text())
MOVES = ["Left", "Down", "Right", "Up", "", "jump", "<answer>Down</answer>"]


def _require(*names: str) -> None:
    require_packages(*names)


def play(env: Any, rng: np.random.Generator, max_calls: int) -> None:
    """Mostly expert moves, some garbage; sometimes the rollout stops calling ``act`` early."""
    stop = max_calls + 1 if rng.random() < 0.6 else int(rng.integers(0, max_calls + 1))
    for _ in range(stop):
        if rng.random() < 0.75:
            try:
                env.act(env.env.unwrapped.expert_action())
                continue
            except Exception:
                pass
        env.act(MOVES[int(rng.integers(len(MOVES)))])


def rollout_figures(e: Any) -> dict[str, Any]:
    return {
        "reward": e.get_reward(),
        "process_score": e.process_score,
        "step_credits": e.step_credits,
        "mean_step_score": e.mean_step_score,
        "turns": e.turns,
        "success": e.success,
        "turn_rewards": e.turn_rewards,
        "budget": e.infos[0]["max_turns"],
        "done": e.done,
    }


@pytest.mark.parametrize("name", sorted(GOLDEN["trl"]))
def test_the_trainer_computes_the_rewards_and_advantages_it_computed_before(name: str) -> None:
    """Old configs load; their rollouts score and their GiGPO groups advantage as before."""
    _require("trl")
    from multiturn_envs.rl.run_view import RunView
    from multiturn_envs.rl.trainer import group_advantages, trajectory_of
    from multiturn_envs.rl.training import train_rows

    golden = GOLDEN["trl"][name]
    with warnings.catch_warnings():  # the old vocabulary: step_weight, "step_score", ...
        warnings.simplefilter("ignore", DeprecationWarning)
        config = TrainConfig.from_dict(golden["config"])
    view = RunView.of(config)
    old_reward = golden["config"]["reward"]
    assert config.advantage == ("gigpo" if old_reward == "gigpo" else "grpo")
    rows = train_rows(config, view)[: len(golden["groups"])]
    for r, (row, want) in enumerate(zip(rows, golden["groups"])):
        assert {k: v for k, v in row.items() if k != "prompt"} == want["row"]
        envs = []
        for g in range(config.num_generations):
            e = view.environment()
            e.reset(**row)
            play(e, np.random.default_rng([r, g, 7]), config.max_budget)
            envs.append(e)
        assert [rollout_figures(e) for e in envs] == want["rollouts"]
        if config.advantage != "gigpo":
            continue
        step_reward = config.make_step_reward()
        trajectories = [trajectory_of(e, step_reward) for e in envs]
        assert [[float(x) for x in t.rewards] for t in trajectories] == want["traj_rewards"]
        assert [t.total for t in trajectories] == want["traj_return"]
        (adv,) = group_advantages(
            envs,
            config.num_generations,
            step_reward=step_reward,
            gamma=config.gigpo_gamma,
            step_weight=config.gigpo_step_weight,
        )
        assert adv.episode == want["episode_adv"]
        assert [c.tolist() for c in adv.combined] == want["combined_adv"]


def test_the_process_reward_wrapper_pays_what_it_paid() -> None:
    for case in GOLDEN["wrapper"]:
        seed = case["seed"]
        env = ProcessReward(
            gym.make(
                "MT/FrozenLake-v0",
                is_slippery=bool(seed % 2),
                max_turns=6,
                disable_env_checker=True,
            ),
            **case["params"],
        )
        rng = np.random.default_rng(seed)
        env.reset(seed=seed, options={"task_id": ["4x4", "random-s3-p0.8-n0"][seed % 2]})
        steps = []
        while True:
            _, r, te, tr, info = env.step(MOVES[int(rng.integers(len(MOVES)))])
            steps.append([r, info["outcome_reward"], info["process_reward"]])
            if te or tr:
                break
        assert steps == case["steps"]


def test_skyrl_pays_each_step_what_it_paid() -> None:
    _require("skyrl_gym")
    import skyrl_gym

    from multiturn_envs.adapters.skyrl import register_skyrl_envs

    register_skyrl_envs()
    for case in GOLDEN["skyrl"]:
        seed = case["seed"]
        with pytest.deprecated_call(match="step_score_weight"):  # the old spelling, kept
            env = skyrl_gym.make(
                "MT/FrozenLake-v0",
                extras={"task_id": "4x4", "seed": seed, "mt_max_turns": 5},
                step_score_weight=0.3,
            )
        env.init([])
        rng = np.random.default_rng(seed)
        rewards = []
        while True:
            out = env.step(MOVES[int(rng.integers(len(MOVES)))])
            rewards.append(out["reward"])
            if out["done"]:
                break
        assert rewards == case["rewards"] and env.get_metrics() == case["metrics"]
        env.close()


class _Trace:
    def __init__(self, mt: dict[str, Any]) -> None:
        self.info = {"mt": mt}


def test_the_verifiers_rubric_scores_what_it_scored() -> None:
    """Old traces (no ``infos`` stored) score as before; so do new ones of the same episode."""
    _require("verifiers")
    from multiturn_envs.adapters.verifiers import MTTask
    from multiturn_envs.rewards import slim_info

    names = ["success", "step_score", "turns", "env_return", "first_success_turn"]
    for seed, case in enumerate(GOLDEN["verifiers"]):
        old = _Trace(case["episode"])
        assert {n: asyncio.run(getattr(MTTask, n)(None, old)) for n in names} == case["values"]
        # the same episode as MTEnv stores it today: the reset info and each turn's info too
        env = gym.make("MT/FrozenLake-v0", max_turns=4, disable_env_checker=True)
        _, start = env.reset(seed=seed, options={"task_id": "4x4"})
        rng = np.random.default_rng(seed)
        infos = []
        while True:
            _, _, te, tr, info = env.step(MOVES[int(rng.integers(len(MOVES)))])
            infos.append(slim_info(info))
            if te or tr:
                break
        new = _Trace({**case["episode"], "start": slim_info(start), "infos": infos})
        assert {n: asyncio.run(getattr(MTTask, n)(None, new)) for n in names} == case["values"]
