"""The TRL adapter, at TRL's own interface: one real GRPO step on the CPU with a tiny model.

Skips without ``trl`` (and torch/transformers) locally; fails under ``CI=true``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.adapters.trl import (
    ENDED,
    TOOL_HINT,
    TRLEnvironment,
    environment_factory,
    grpo_rows,
    step_credit,
)
from multiturn_envs.testing import GuessEnv, require_packages
from multiturn_envs.wrappers import BudgetMix, ProcessReward

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _require_trl() -> None:
    require_packages("trl", "torch", "transformers", "datasets")
    import torch

    torch.set_num_threads(1)


def _guess(max_turns: int = 4) -> gym.Env[str, str]:
    return ProcessReward(GuessEnv(max_turns=max_turns), step_weight=0.5)


# ---------------------------------------------------------------------- the adapter alone
def test_public_methods_are_exactly_reset_act_get_reward() -> None:
    """TRL makes every public method a tool: only ``act`` may be one."""
    import inspect

    public = {
        name
        for name, _ in inspect.getmembers(TRLEnvironment, predicate=inspect.isfunction)
        if not name.startswith("_")
    }
    assert public == {"reset", "act", "get_reward"}


def test_reset_reads_row_columns_and_act_steps_the_env() -> None:
    env = TRLEnvironment(GuessEnv(max_turns=3))
    obs = env.reset(prompt=[{"role": "user", "content": ""}], task_id="secret-5", seed=1)
    assert obs.startswith("Guess my number")
    assert env.act("guess 2") == "2 is too low."
    assert env.act("nonsense").startswith("I need")  # a malformed action costs a turn
    assert env.turns == 2 and not env.done
    last = env.act("guess 9")
    assert env.done and "turn budget is spent" in last
    assert env.act("guess 5") == ENDED and env.turns == 3  # nothing stepped after the end
    assert env.get_reward() == 0.0
    assert [m["role"] for m in env.messages] == ["user"] + ["assistant", "user"] * 3
    env.reset(task_id="secret-5", seed=1, max_turns=1)
    assert env.act("guess 5").startswith("Correct!") and env.done
    assert env.get_reward() == 1.0 and env.success


def test_row_budget_applies_to_that_episode_only() -> None:
    env = TRLEnvironment(GuessEnv(max_turns=5))
    env.reset(task_id="secret-0", seed=0, max_turns=2)
    assert env.infos[0]["max_turns"] == 2
    env.reset(task_id="secret-0", seed=0)
    assert env.infos[0]["max_turns"] == 5


def test_budget_mix_draws_the_budget_from_the_row_seed() -> None:
    env = TRLEnvironment(BudgetMix(GuessEnv(), budgets=[1, 2, 3, 4, 5, 6]))
    drawn = {}
    for seed in range(12):
        env.reset(task_id="secret-3", seed=seed)
        drawn[seed] = env.infos[0]["max_turns"]
        env.reset(task_id="secret-3", seed=seed)
        assert env.infos[0]["max_turns"] == drawn[seed]
    assert len(set(drawn.values())) > 1


def test_reward_modes_and_process_reward() -> None:
    shaped = TRLEnvironment(_guess(), reward="outcome")
    success = TRLEnvironment(_guess(), reward="success")
    for env in (shaped, success):
        env.reset(task_id="secret-12", seed=0)
        env.act("guess 7")  # oracle score 1 - 8/16 = 0.5
        env.act("guess 12")
    assert success.get_reward() == 1.0
    assert shaped.get_reward() == pytest.approx(1.0 + 0.5 * (0.5 + 1.0))
    with pytest.raises(ValueError, match="reward must be"):
        TRLEnvironment(GuessEnv(), reward="best")  # type: ignore[arg-type]


def test_hostile_tool_arguments_never_raise() -> None:
    env = TRLEnvironment(GuessEnv(max_turns=20))
    env.reset(task_id="secret-1", seed=0)
    for action in ["", "\x00\xff", "🤖" * 1000, {"nested": [1, 2]}, 42, None]:
        out = env.act(action)  # type: ignore[arg-type]
        assert isinstance(out, str) and out


def test_grpo_rows_carry_prompt_task_seed_and_budget() -> None:
    rows = grpo_rows(GuessEnv(), ["secret-1", "secret-2"], seeds=[7, 8], budgets=[2, None])
    assert [r["task_id"] for r in rows] == ["secret-1", "secret-2"]
    assert [r["seed"] for r in rows] == [7, 8]
    assert [r["max_turns"] for r in rows] == [2, None]
    assert rows[0]["prompt"][0] == {"role": "system", "content": TOOL_HINT}
    assert rows[0]["prompt"][1] == {"role": "user", "content": ""}
    lake = grpo_rows("MT/FrozenLake-v0", ["4x4"], max_turns=3)
    assert lake[0]["prompt"][0]["content"].startswith("You play FrozenLake")
    with pytest.raises(ValueError, match="one entry per task"):
        grpo_rows(GuessEnv(), ["secret-1"], seeds=[1, 2])


# ---------------------------------------------------------------------- one real GRPO step
@pytest.fixture(scope="module")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model whose tokenizer fits GuessEnv's tool chats (tool frames = 1 token)."""
    _require_trl()
    from multiturn_envs.rl.tiny_agent import build_tiny_tool_model
    from multiturn_envs.rl.tool_format import random_tool_chats

    tasks = [f"secret-{i}" for i in range(16)]
    return build_tiny_tool_model(
        tmp_path_factory.mktemp("tool_lm"),
        random_tool_chats(GuessEnv(max_turns=4), tasks, episodes=24, system=TOOL_HINT),
        tools=[TRLEnvironment(GuessEnv()).act],
        system=TOOL_HINT,
        extra_texts=[ENDED, "Done."],
        vocab_size=1024,
    )


def test_one_grpo_step_steps_the_env_rewards_reach_trainer_and_weights_move(
    tool_model: Path, tmp_path: Path
) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from multiturn_envs.rl.tiny_lm import load_tiny_chat_model
    from multiturn_envs.rl.tool_format import warm_start_tool_calls

    model, tokenizer = load_tiny_chat_model(tool_model)
    probe = TRLEnvironment(GuessEnv())
    report = warm_start_tool_calls(
        model,
        tokenizer,
        lambda: GuessEnv(max_turns=4),
        [probe.act],
        tasks=[f"secret-{i}" for i in range(16)],
        system=TOOL_HINT,
        episodes=16,
        steps=240,  # 160 left a few of 32 seeds at 16-28/32 tool calls; 240: 32/32 on those
        lr=5e-3,
    )
    assert report.last_loss < report.first_loss

    made: list[TRLEnvironment] = []
    make = environment_factory(_guess)

    def factory() -> TRLEnvironment:
        made.append(make())
        return made[-1]

    rows = grpo_rows(GuessEnv(), ["secret-11", "secret-4"], seeds=[0, 1])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=8,  # both rows, 4 completions each
        num_generations=4,
        temperature=0.7,  # a sharper sampler: ~16/16 first replies are tool calls across seeds
        max_completion_length=160,
        max_tool_calling_iterations=5,
        learning_rate=1e-2,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        shuffle_dataset=False,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=Dataset.from_list(rows),
        environment_factory=factory,
    )
    trainer.train()

    stepped = [env for env in made if env.turns > 0]
    assert stepped, "no rollout called the act tool"
    for env in stepped:  # the env saw the row's task and the model's tool-call actions
        assert env.infos[0]["task_id"] in {"secret-11", "secret-4"}
        assert any(m["role"] == "assistant" for m in env.messages)
    logs: dict[str, Any] = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    key = "rewards/TRLEnvironment/mean"
    assert key in logs, sorted(logs)
    rewards = [env.get_reward() for env in stepped]
    assert max(rewards) > 0.0  # shaped rewards from the oracle reached the trainer's log
    assert logs[key] > 0.0
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "the GRPO step did not change any weight"


def test_process_reward_is_outcome_plus_weight_times_credits_over_the_turns_taken() -> None:
    env = TRLEnvironment(GuessEnv(max_turns=4), reward={"name": "process", "weight": 0.5})
    env.reset(task_id="secret-12", seed=0)
    env.act("guess 7")  # oracle score 1 - 8/16 = 0.5
    env.act("guess 12")  # solved, score 1.0
    assert env.step_scores == [0.5, 1.0] and env.turn_rewards == [0.0, 1.0]
    assert env.get_reward() == pytest.approx(1.0 + 0.5 * 1.5 / 2)  # the episode took 2 turns
    stopper = TRLEnvironment(GuessEnv(max_turns=4), reward={"name": "process", "weight": 0.5})
    stopper.reset(task_id="secret-12", seed=0)
    stopper.act("guess 7")  # one fair move, then no more calls: the turns left score 0
    assert stopper.get_reward() == pytest.approx(0.5 * 0.5 / 4)
    assert env.act("guess 1") == ENDED and env.calls == 3 and env.turns == 2


LAKE = "map:SFF/FFF/FFG"  # 4 moves from start to goal


def test_process_reward_gives_no_credit_to_unparsable_replies_or_lost_states() -> None:
    env = TRLEnvironment(
        "MT/FrozenLake-v0",
        reward={"name": "process", "weight": 1.0},
        max_turns=6,
        is_slippery=False,
    )
    env.reset(task_id=LAKE, seed=0)
    env.act("")  # a wasted turn with slack left: the oracle loses nothing (1.0), no credit
    env.act("Up")  # bumps the wall: a real move, still within the slack
    env.act("Left")  # 3 turns left for 4 moves: the state is lost (score 0)
    env.act("Down")  # from a lost state the oracle scores every move 1.0
    assert env.step_scores == [1.0, 1.0, 0.0, 1.0]
    assert [i["state_value"] for i in env.infos[1:]] == [1.0, 1.0, 1.0, 0.0]
    assert env.step_credits == [0.0, 1.0, 0.0, 0.0]
    assert env.process_score == pytest.approx(1.0 / 6)  # still running: over the budget of 6
    env.act("Right")
    env.act("Right")  # the budget ends
    assert env.done and not env.success
    assert env.process_score == pytest.approx(1.0 / 6) and env.get_reward() == env.process_score
    straight = TRLEnvironment(
        "MT/FrozenLake-v0",
        reward={"name": "process", "weight": 1.0},
        max_turns=6,
        is_slippery=False,
    )
    straight.reset(task_id=LAKE, seed=0)
    for move in ("Right", "Right", "Down", "Down"):
        straight.act(move)
    assert straight.success and straight.get_reward() == pytest.approx(2.0)  # 1 + 4/4


def test_walking_into_a_hole_pays_no_more_than_stopping() -> None:
    def played(moves: list[str]) -> TRLEnvironment:
        env = TRLEnvironment(
            "MT/FrozenLake-v0",
            reward={"name": "process", "weight": 1.0},
            max_turns=6,
            is_slippery=False,
        )
        env.reset(task_id="map:SFH/FHF/FFG", seed=0)
        for move in moves:
            env.act(move)
        return env

    stopped, holed = played(["Down"]), played(["Down", "Right"])  # (1, 1) is a hole
    assert holed.done and not holed.success and not stopped.done
    assert holed.step_credits == [1.0, 0.0]
    assert holed.get_reward() == stopped.get_reward() == pytest.approx(1.0 / 6)


@settings(max_examples=40, deadline=None)
@given(
    moves=st.lists(st.sampled_from(["Left", "Down", "Right", "Up", "", "jump"]), max_size=8),
    budget=st.integers(1, 6),
)
def test_step_credit_never_exceeds_the_oracle_and_the_process_score_is_a_fraction(
    moves: list[str], budget: int
) -> None:
    env = TRLEnvironment(
        "MT/FrozenLake-v0",
        reward={"name": "process", "weight": 1.0},
        max_turns=budget,
        is_slippery=False,
    )
    env.reset(task_id="map:SFH/FHF/FFG", seed=0)
    for move in moves:
        env.act(move)
    for info in env.infos[1:]:
        credit = step_credit(info)
        assert credit is not None and 0.0 <= credit <= info["step_score"]
        if info["parse_error"] or info["state_value"] == 0.0:
            assert credit == 0.0
    assert 0.0 <= env.process_score <= 1.0
    assert env.get_reward() == pytest.approx(float(env.success) + env.process_score)


def test_process_reward_rejects_a_bad_weight() -> None:
    with pytest.raises(ValueError, match="weight"):
        TRLEnvironment(GuessEnv(), reward={"name": "process", "weight": float("nan")})


def test_the_old_spellings_still_score_alike_and_say_what_to_write() -> None:
    """``step_weight`` and ``"return"`` (before the rewards registry) warn for one release."""
    with pytest.deprecated_call(match=r"reward=\{'name': 'process', 'weight': 0.3\}"):
        old = TRLEnvironment(GuessEnv(max_turns=4), reward="process", step_weight=0.3)
    with pytest.deprecated_call(match="write 'outcome'"):
        returned = TRLEnvironment(GuessEnv(max_turns=4), reward="return")
    new = TRLEnvironment(GuessEnv(max_turns=4), reward={"name": "process", "weight": 0.3})
    assert old.reward == new.reward and returned.reward.name == "outcome"
    for env in (old, new):
        env.reset(task_id="secret-12", seed=0)
        env.act("guess 7")
    assert old.get_reward() == new.get_reward()
    with pytest.deprecated_call(), pytest.raises(ValueError, match="step_weight"):
        TRLEnvironment(GuessEnv(), reward="process", step_weight=float("nan"))
