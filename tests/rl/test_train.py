"""The training entry point: real GRPO steps through TRL on FrozenLake with a tiny model.

Rewards must reach TRL's trainer, weights must move, GiGPO must hand TRL (B,T) advantages that
differ between turns, and a run must resume from a checkpoint. Skips without trl locally;
fails under ``CI=true``.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.cli.app import main
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.trainer import anchor_of, cut_by_length, model_spans, token_advantages
from multiturn_envs.testing import GuessEnv, require_packages

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TASKS = ["random-s3-p0.8-n0", "random-s3-p0.8-n1"]


def _require_trl() -> None:
    require_packages("trl", "torch", "transformers", "datasets")


# ---------------------------------------------------------------------- pieces, no model
@given(st.lists(st.integers(0, 1), max_size=40))
def test_model_spans_cover_exactly_the_ones(mask: list[int]) -> None:
    spans = model_spans(mask)
    covered = [0] * len(mask)
    for start, end in spans:
        assert start < end
        covered[start:end] = [1] * (end - start)
    assert covered == mask
    assert all(b[0] > a[1] for a, b in itertools.pairwise(spans))  # maximal: a gap between runs


def test_token_advantages_put_each_turn_on_its_span_and_guard_misalignment() -> None:
    mask = np.array([[1, 1, 0, 0, 1, 1, 0, 1], [1, 0, 1, 0, 1, 0, 1, 0]])
    per_turn = [np.array([2.0, 3.0]), np.array([5.0])]
    out, bad = token_advantages(mask, [2, 1], per_turn, [0.5, -1.0])
    assert out[0].tolist() == [2, 2, 0.5, 0.5, 3, 3, 0.5, 0.5]  # closing reply: episode value
    assert bad == 1 and out[1].tolist() == [-1.0] * 8  # 4 spans for 1 call: episode value only


def test_cut_by_length_tells_the_cap_from_the_model_and_the_env() -> None:
    # the result of the third call would have passed the cap: TRL dropped it and stopped
    assert cut_by_length(length=250, spans=3, calls=3, done=False, limit=256)
    assert cut_by_length(length=256, spans=3, calls=2, done=False, limit=256)  # a reply cut
    assert cut_by_length(length=0, spans=0, calls=2, done=False, limit=256)  # rows TRL masked
    assert not cut_by_length(length=90, spans=3, calls=2, done=False, limit=256)  # said "Done."
    assert not cut_by_length(length=40, spans=1, calls=0, done=False, limit=256)  # never called
    assert not cut_by_length(length=256, spans=4, calls=4, done=True, limit=256)  # episode over


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).resolve().parents[2] / "examples" / "train").rglob("*.json")),
    ids=lambda p: p.name,
)
def test_example_train_configs_are_valid(path: Path) -> None:
    config = TrainConfig.from_file(path)
    assert config.max_completion_length >= 1024  # room for a whole episode's turns and results


def test_anchor_includes_the_turns_left() -> None:
    """FrozenLake's Q_h depends on the turns left: same cell, other budget = other anchor."""
    a = anchor_of({"state_key": "lake:3", "turns_left": 2})
    b = anchor_of({"state_key": "lake:3", "turns_left": 3})
    assert a != b and a == anchor_of({"state_key": "lake:3", "turns_left": 2})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("reward", "best", "reward must be one of"),
        ("batch_size", 6, "multiple of num_generations"),
        ("budget_mix", [2, 9], "must not exceed max_turns"),
        ("num_generations", 1, ">= 2"),
        ("learning_rate", float("nan"), "finite"),
        ("max_turn_tokens", -1, "max_turn_tokens must be an int >= 0"),
        ("warm_start", "none", "random tiny model"),
        ("sft_frame_weight", 0, "sft_frame_weight must be a finite number > 0"),
        ("sft_trl", ["cosine"], "sft_trl must be a JSON object"),
        # a config file and --set bypass the flags' ranges (issue 29): types and maxima here
        ("steps", "5", "steps must be an int"),
        ("steps", 10**12, "steps must be at most 10,000,000"),
        ("gigpo_gamma", "x", "gigpo_gamma must be a number"),
        ("trl", [], "trl must be a JSON object"),
        ("budget_mix", ["a"], "budget_mix must be a list of ints or null"),
        ("tiny", {"layers": "2"}, "tiny must be a JSON object of numbers"),
        ("reward", {"name": "process", "weight": 1e300}, "reward weight must be at most"),
        ("reward", {"name": "process", "weight": -1}, "weight must be a finite number >= 0"),
        ("reward", 3, "reward must be a string or a JSON object"),
        ("temperature", float("inf"), "temperature must be finite"),
        ("sft_closing", "yes", "sft_closing must be true or false"),
    ],
)
def test_bad_config_fields_are_named(field: str, value: Any, match: str) -> None:
    data: dict[str, Any] = {"warm_start": "format", "num_generations": 4, "batch_size": 8}
    data[field] = value
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_dict(data)


def test_cli_bad_config_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"reward": "outcome", "stepz": 3}))
    assert main(["train", "--config", str(bad)]) == 2
    assert "unknown field(s) ['stepz']" in capsys.readouterr().err
    assert main(["train", "--set", "steps=0", "--warm-start", "format"]) == 2
    nothing = tmp_path / "empty"
    args = ["train", "--warm-start", "format", "--output-dir", str(nothing), "--resume-checkpoint"]
    assert main(args) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_cli_hostile_config_files_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train --config`` is a file anyone may hand it (issue 29): bounded, never a hang."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    big = tmp_path / "big.json"
    big.write_text('{"model": "' + "x" * (2 << 20) + '"}')
    for path, match in [(fifo, "FIFO"), (deep, "nested"), (big, "over the limit")]:
        assert main(["train", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1, err
    assert main(["train", "--warm-start", "format", "--set", "gigpo_gamma=x"]) == 2
    assert "gigpo_gamma must be a number" in capsys.readouterr().err


STUDY = Path(__file__).parent / "data" / "old_study_config.json"
"""``examples/study/config.json`` as of commit 7d4706a (the study's recipe has changed since; the
arms saved below were made from this one)."""
OLD_ARMS = json.loads((Path(__file__).parent / "data" / "old_study_train_configs.json").read_text())
"""The study's four arms as ``train_config.json`` saved them before the estimator had its own
field (written by the config code of commit 7d4706a: ``"reward": "gigpo"``,
``"gigpo_step_reward": "env"``, no ``advantage``)."""


@pytest.mark.parametrize("arm", sorted(OLD_ARMS))
def test_a_run_saved_in_the_old_vocabulary_is_the_same_run_today(arm: str, tmp_path: Path) -> None:
    """Resume and the study's reuse of an arm (``ran_with``) keep working across the change."""
    from multiturn_envs.rl.checkpoints import CONFIG_FILE, ran_with

    study = json.loads(STUDY.read_text())
    folder = tmp_path / arm
    folder.mkdir()
    saved = {**OLD_ARMS[arm], "output_dir": str(folder)}  # the one field that names the place
    (folder / CONFIG_FILE).write_text(json.dumps(saved))
    base = TrainConfig.from_dict(study["base"])
    today = TrainConfig.from_dict(
        {**base.to_dict(), **study["arms"][arm], "output_dir": str(folder)}
    )
    assert ran_with(today) and TrainConfig.from_dict(saved).to_dict() == today.to_dict()
    assert (today.make_reward().name, today.advantage) == {
        "gigpo": ("outcome", "gigpo"),
        "process": ("process", "grpo"),
    }.get(arm, ("outcome", "grpo"))
    assert today.gigpo_step_reward == "outcome"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"reward": "gigpo"}, {"reward": "outcome", "advantage": "gigpo"}),
        ({"reward": "gigpo", "advantage": "grpo"}, {"reward": "outcome", "advantage": "gigpo"}),
        ({"gigpo_step_reward": "env"}, {"gigpo_step_reward": "outcome"}),
        ({"gigpo_step_reward": "step_score"}, {"gigpo_step_reward": "step_credit"}),
        (
            {"reward": "process", "advantage": "gigpo"},
            {"reward": {"name": "process", "weight": 0.5}, "advantage": "gigpo"},
        ),
    ],
)
def test_old_reward_names_map_to_a_reward_and_an_estimator(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    config = TrainConfig.from_dict({"warm_start": "format", **old})
    assert {k: getattr(config, k) for k in new} == new
    assert TrainConfig.from_dict(config.to_dict()) == config  # canonical: a second load is a no-op


def test_every_reward_combines_with_every_estimator() -> None:
    from multiturn_envs.rewards import reward_names
    from multiturn_envs.rl.config import ADVANTAGES

    for reward in reward_names():
        for advantage in ADVANTAGES:
            config = TrainConfig.from_dict(
                {"warm_start": "format", "reward": reward, "advantage": advantage}
            )
            assert config.make_reward().name == reward
    process = TrainConfig.from_dict(
        {"warm_start": "format", "reward": {"name": "process", "weight": 0.25}}
    ).make_reward()
    assert process.spec() == {"name": "process", "weight": 0.25}


def test_an_old_config_s_step_weight_says_what_to_write_and_means_what_it_meant() -> None:
    """``step_weight`` (before the reward was one spec) weighs the config's process rewards,
    the estimator's step reward too, and nothing else; it warns for one release."""
    with pytest.deprecated_call(match=r"reward=\{'name': 'process', 'weight': w\}"):
        old = TrainConfig.from_dict(
            {"warm_start": "format", "reward": "process", "step_weight": 0.25,
             "gigpo_step_reward": "process"}
        )  # fmt: skip
    assert old.reward == old.gigpo_step_reward == {"name": "process", "weight": 0.25}
    with pytest.deprecated_call():
        ignored = TrainConfig.from_dict({"warm_start": "format", "step_weight": 7.0})
    assert ignored.reward == "outcome" and "step_weight" not in ignored.to_dict()
    assert TrainConfig.from_dict({"warm_start": "format", "reward": "process"}).reward == {
        "name": "process",
        "weight": 0.5,
    }


def test_process_reward_with_gigpo_advantages_by_hand() -> None:
    """GiGPO over process-reward rollouts: the episode part normalises the process scores, the
    step part the chosen step reward's return-to-go within shared anchors."""
    _require_trl()
    from multiturn_envs.adapters.trl import TRLEnvironment
    from multiturn_envs.rewards import Process
    from multiturn_envs.rl.trainer import group_advantages

    envs = []
    for moves in (["guess 7", "guess 12"], ["guess 7", "guess 3", "guess 12"]):
        env = TRLEnvironment(GuessEnv(max_turns=4), reward={"name": "process", "weight": 0.5})
        env.reset(task_id="secret-12", seed=0)
        for move in moves:
            env.act(move)
        envs.append(env)
    (adv,) = group_advantages(envs, 2, step_reward="process", gamma=1.0, step_weight=1.0)
    scores = np.array([e.get_reward() for e in envs])
    assert scores[0] == pytest.approx(1.0 + 0.5 * 1.5 / 2)  # solved in 2: N = 2
    expected = (scores - scores.mean()) / (scores.std() + 1e-6)
    assert adv.episode == pytest.approx(expected.tolist())
    # turns 0 and 1 share anchors (the same state with the same turns left; "guess 3" is out of
    # the range left, so it changes nothing): step part = return-to-go minus the group's mean
    credits = [Process(weight=0.5).credits(e.episode) for e in envs]
    for t in (0, 1):
        togo = [sum(c[t:]) for c in credits]
        assert adv.step[0][t] == pytest.approx(togo[0] - np.mean(togo))
        assert adv.step[1][t] == pytest.approx(togo[1] - np.mean(togo))
    assert adv.step[1][2] == 0.0  # two turns left there: a singleton anchor
    assert adv.combined[1][0] == pytest.approx(adv.episode[1] + adv.step[1][0])


def test_train_cli_takes_a_reward_and_an_estimator(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from multiturn_envs.cli.train import add_parser, config_of

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["train", "--reward", "process", "--advantage", "gigpo",
                              "--warm-start", "format"])  # fmt: skip
    config = config_of(args)
    assert (config.reward, config.advantage) == ({"name": "process", "weight": 0.5}, "gigpo")
    weighed = config_of(parser.parse_args(["train", "--reward", "process", "--step-weight",
                                           "0.2", "--warm-start", "format"]))  # fmt: skip
    assert weighed.make_reward().spec() == {"name": "process", "weight": 0.2}
    legacy = config_of(parser.parse_args(["train", "--reward", "gigpo", "--warm-start", "sft"]))
    assert (legacy.reward, legacy.advantage) == ("outcome", "gigpo")
    assert main(["train", "--reward", "best", "--warm-start", "format"]) == 2
    assert "reward must be one of" in capsys.readouterr().err
    assert main(["train", "--advantage", "ppo", "--warm-start", "format"]) == 2
    assert "advantage must be one of ('grpo', 'gigpo')" in capsys.readouterr().err


@pytest.mark.parametrize("closing", [True, False])
def test_expert_examples_imitate_the_expert_and_close_only_when_asked(closing: bool) -> None:
    import gymnasium as gym

    from multiturn_envs.adapters.trl import end_note
    from multiturn_envs.rl.tool_format import CLOSING_REPLY
    from multiturn_envs.rl.warm_start import expert_examples

    examples = expert_examples(
        "MT/FrozenLake-v0",
        {"is_slippery": False},
        TASKS,
        episodes=6,
        max_turns=6,
        system="sys",
        error_share=0.5,
        seed=3,
        closing=closing,
    )
    closings = [e for e in examples if e["completion"][0]["content"] == CLOSING_REPLY]
    assert len(closings) == (6 if closing else 0)  # one per episode, after its end
    env = gym.make("MT/FrozenLake-v0", is_slippery=False, max_turns=6)
    endings = set()
    for example in examples:
        prompt = example["prompt"]
        assert prompt[0] == {"role": "system", "content": "sys"}
        task = next(t for t in TASKS if prompt[1]["content"] in _first_observations(env, t))
        env.reset(seed=0, options={"task_id": task})
        step: tuple[Any, ...] = ()
        for message in prompt[2:]:
            if message["role"] == "assistant":
                step = env.step(message["tool_calls"][0]["function"]["arguments"]["action"])
        if example in closings:
            # the episode is over, and the context shows it as GRPO's act tool does (a spent
            # hidden budget shows nowhere else)
            observation, _, terminated, truncated, info = step
            assert terminated or truncated
            note = end_note(bool(info["success"]), bool(truncated))
            assert prompt[-1]["content"] == f"{observation}\n\n{note}"
            endings.add(note)
            continue
        (call,) = example["completion"][0]["tool_calls"]
        # the target is the expert's move in the state the context ends in
        assert call["function"]["arguments"]["action"] == env.unwrapped.expert_action()
    if closing:
        assert len(endings) >= 2  # holes, the goal or a spent budget: each says its own


def _first_observations(env: Any, task: str) -> set[str]:
    observation, _ = env.reset(seed=0, options={"task_id": task})
    return {observation}


# ---------------------------------------------------------------------- real GRPO steps
def _config(tmp: Path, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = {
        "env_kwargs": {"is_slippery": False},
        "train_tasks": TASKS,
        "model": "tiny",
        "tiny": {"vocab_size": 768},
        "warm_start": "sft",  # expert moves: the model calls act and sometimes reaches the goal
        "sft_steps": 60,
        "sft_episodes": 12,
        "sft_batch_size": 8,
        "sft_error_share": 0.25,
        "sft_learning_rate": 5e-3,
        "max_turns": 4,
        "steps": 1,
        "num_generations": 4,
        "batch_size": 8,
        "learning_rate": 1e-2,
        "temperature": 0.7,
        "max_completion_length": 512,
        "output_dir": str(tmp),
        "threads": 1,
    }
    base.update(kw)
    return TrainConfig.from_dict(base)


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny start model, expert-SFT'd, shared by the runs below."""
    _require_trl()
    from multiturn_envs.rl.models import start_model

    folder = tmp_path_factory.mktemp("start")
    return start_model(_config(folder), folder)


def test_the_sft_loss_can_weigh_the_call_frame_down(start: Path) -> None:
    import torch

    from multiturn_envs.rl.models import load_model
    from multiturn_envs.rl.run_view import RunView
    from multiturn_envs.rl.tool_format import split_reply, tool_call_message
    from multiturn_envs.rl.warm_start import frame_token_ids, weighted_completion_loss

    model, tokenizer = load_model(str(start))
    (tool,) = RunView.of(_config(start)).tool_functions()
    frame = frame_token_ids(tokenizer, [tool])
    added = set(tokenizer.get_added_vocab().values())
    # the tiny model's call frame is two added tokens (before and after the action) and EOS
    assert len(frame) == 3 and tokenizer.eos_token_id in frame and set(frame) <= added
    context = [{"role": "user", "content": "x"}]
    prompt, reply = split_reply(tokenizer, [tool], context, tool_call_message("Down"))
    ids = tokenizer.encode(prompt + reply, add_special_tokens=False)
    n = len(tokenizer.encode(prompt, add_special_tokens=False))
    labels = torch.tensor([[-100] * n + ids[n:]])
    assert [tokenizer.decode([i]) for i in ids[n:] if i not in frame] == ["Down"]
    with torch.no_grad():
        outputs = model(input_ids=torch.tensor([ids]), labels=labels)
        plain = weighted_completion_loss(frame, 1.0)(outputs, labels)
        assert float(plain) == pytest.approx(float(outputs.loss), rel=1e-5)
        # frame weight w: (w x frame NLL + action NLL) / (w x frames + 1)
        nll = torch.nn.functional.cross_entropy(
            outputs.logits[0, n - 1 : -1], torch.tensor(ids[n:]), reduction="none"
        )
        is_frame = torch.tensor([i in frame for i in ids[n:]])
        want = (0.1 * nll[is_frame].sum() + nll[~is_frame].sum()) / (0.1 * is_frame.sum() + 1)
        got = weighted_completion_loss(frame, 0.1)(outputs, labels)
        assert float(got) == pytest.approx(float(want), rel=1e-5)


def test_expert_agreement_is_one_greedy_move_and_a_probability_per_move(start: Path) -> None:
    """Asked about each of the four moves at the same states, the agreement must find the
    greedy reply's move exactly once per state (the SFT'd model's replies are calls), and the
    four calls' probabilities must sum to at most 1 (nearly 1: the model has learnt the
    format)."""
    from multiturn_envs.rl.evaluate import expert_agreement
    from multiturn_envs.rl.models import load_model
    from multiturn_envs.rl.run_view import RunView
    from multiturn_envs.rl.tool_format import tool_call_message
    from multiturn_envs.rl.warm_start import expert_examples

    config = _config(start)
    view = RunView.of(config)
    model, tokenizer = load_model(str(start))
    states = expert_examples(
        config.env_id,
        config.env_kwargs,
        TASKS,
        episodes=2,
        max_turns=4,
        system=view.system_prompt,
        seed=5,
        closing=False,
    )[:4]
    per_move = [
        expert_agreement(
            model,
            tokenizer,
            view.tool_functions(),
            [{**e, "completion": [tool_call_message(move)]} for e in states],
            max_tokens=24,
        )
        for move in ("Left", "Down", "Right", "Up")
    ]
    assert all(a.states == len(states) and a.malformed == 0.0 for a in per_move)
    assert sum(a.greedy for a in per_move) == pytest.approx(1.0)
    total = sum(a.sampled for a in per_move)
    assert 0.5 < total <= 1.0 + 1e-6


def _weights(folder: Path) -> dict[str, Any]:
    from multiturn_envs.rl.models import load_model

    model, _ = load_model(str(folder))
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _moved(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    import torch

    return [n for n in a if not torch.equal(a[n], b[n])]


def test_process_reward_reaches_the_trainer_and_weights_move(start: Path, tmp_path: Path) -> None:
    from multiturn_envs.rl.training import train

    result = train(_config(tmp_path, reward={"name": "process", "weight": 0.5}), start=start)
    (entry,) = result.log
    assert entry["env/turns"] > 0, "no rollout called the act tool"
    assert entry["env/step_score"] > 0
    # the trainer's reward is the env's (outcome + 0.5 x step scores over the budget)
    assert entry["reward"] == pytest.approx(entry["env/trajectory_reward"], abs=1e-5)
    assert entry["reward"] > entry["env/success"]  # the process part reached the trainer
    assert entry["rewards/TRLEnvironment/mean"] == pytest.approx(entry["reward"])
    assert _moved(_weights(start), _weights(result.model_dir))


def test_gigpo_gives_trl_token_advantages_that_vary_within_a_rollout(
    start: Path, tmp_path: Path
) -> None:
    from multiturn_envs.rl import training as train_module

    seen: dict[str, Any] = {}
    from multiturn_envs.rl.trainer import MultiTurnGRPOTrainer

    original = MultiTurnGRPOTrainer._gigpo

    def spy(self: Any, out: dict[str, Any], envs: list[Any]) -> dict[str, float]:
        figures = original(self, out, envs)
        seen["advantages"] = out["advantages"].clone()
        seen["mask"] = (out["completion_mask"] * out["tool_mask"]).clone()
        return figures

    MultiTurnGRPOTrainer._gigpo = spy  # type: ignore[method-assign]
    try:
        # step scores as GiGPO's step reward: dense, so shared anchors give non-zero A_step
        config = _config(
            tmp_path, reward="gigpo", gigpo_step_reward="step_score", budget_mix=[2, 4]
        )
        result = train_module.train(config, start=start)
    finally:
        MultiTurnGRPOTrainer._gigpo = original  # type: ignore[method-assign]
    adv, mask = seen["advantages"], seen["mask"]
    assert adv.dim() == 2 and adv.shape == mask.shape  # (B, T) went into TRL's loss
    varying = [
        row for row in range(adv.shape[0]) if len(set(adv[row][mask[row].bool()].tolist())) > 1
    ]
    assert varying, "no rollout got different advantages on different turns"
    (entry,) = result.log
    assert "gigpo/misaligned" in entry and entry["gigpo/misaligned"] < 0.5
    assert _moved(_weights(start), _weights(result.model_dir))


def test_process_reward_trains_with_gigpo_advantages(start: Path, tmp_path: Path) -> None:
    """A reward and an estimator are two choices: the process reward under GiGPO, its own
    per-turn credits as the step returns, reaches TRL as (B, T) advantages."""
    from multiturn_envs.rl.trainer import MultiTurnGRPOTrainer
    from multiturn_envs.rl.training import train

    seen: dict[str, Any] = {}
    original = MultiTurnGRPOTrainer._gigpo

    def spy(self: Any, out: dict[str, Any], envs: list[Any]) -> dict[str, float]:
        figures = original(self, out, envs)
        seen["advantages"] = out["advantages"].clone()
        seen["rewards"] = [e.get_reward() for e in envs]
        seen["reward"] = self.step_reward
        return figures

    MultiTurnGRPOTrainer._gigpo = spy  # type: ignore[method-assign]
    try:
        config = _config(
            tmp_path, reward={"name": "process", "weight": 0.5}, advantage="gigpo",
            gigpo_step_reward="process",
        )  # fmt: skip
        result = train(config, start=start, progress=False)
    finally:
        MultiTurnGRPOTrainer._gigpo = original  # type: ignore[method-assign]
    (entry,) = result.log
    assert seen["advantages"].dim() == 2 and seen["reward"].spec() == config.make_reward().spec()
    assert entry["reward"] == pytest.approx(entry["env/trajectory_reward"], abs=1e-5)
    assert entry["reward"] > entry["env/success"]  # the process part is in the rollouts' reward
    assert "gigpo/misaligned" in entry
    assert _moved(_weights(start), _weights(result.model_dir))


def test_checkpoints_and_resume(start: Path, tmp_path: Path) -> None:
    from multiturn_envs.rl.checkpoints import latest_checkpoint
    from multiturn_envs.rl.training import train

    config = _config(tmp_path, reward="process", steps=2, save_steps=1)  # dense: weights move
    first = train(config, start=start, progress=False)
    assert [e["step"] for e in first.log] == [1, 2]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    state = json.loads((tmp_path / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    saved = json.loads((tmp_path / "train_config.json").read_text())
    del saved["sft_closing"]  # a run started before that field existed resumes all the same
    (tmp_path / "train_config.json").write_text(json.dumps(saved))
    resumed = train(config, resume=str(tmp_path / "checkpoint-1"), start=start, progress=False)
    assert [e["step"] for e in resumed.log] == [1, 2]  # step 2 ran again, replacing its line
    assert _moved(_weights(tmp_path / "checkpoint-1"), _weights(resumed.model_dir))
    other = _config(tmp_path, reward="process", steps=3, save_steps=1)
    with pytest.raises(ValueError, match="differs from this config"):
        train(other, resume=True, start=start)


def test_max_turn_tokens_caps_each_reply_not_the_rollout(start: Path, tmp_path: Path) -> None:
    """A tool call takes about four tokens of the tiny model (frame, action, frame, end): capped
    at two tokens a reply no call is ever complete; capped at six, rollouts run several turns
    and hold more model tokens than one reply may."""
    from multiturn_envs.rl.training import train

    capped = train(_config(tmp_path / "capped", max_turn_tokens=2), start=start, progress=False)
    (entry,) = capped.log
    assert entry["env/turns"] == 0 and entry["tools/call_frequency"] == 0
    assert entry["completions/max_length"] <= 2
    roomy = train(_config(tmp_path / "roomy", max_turn_tokens=6), start=start, progress=False)
    (entry,) = roomy.log
    assert entry["env/turns"] > 1
    assert entry["completions/max_length"] > 6


def test_grpo_settings_put_the_reply_cap_where_the_generator_reads_it(tmp_path: Path) -> None:
    from multiturn_envs.rl.training import grpo_settings

    def config(**kw: Any) -> TrainConfig:
        return TrainConfig.from_dict({"warm_start": "format", "output_dir": str(tmp_path), **kw})

    assert "generation_kwargs" not in grpo_settings(config())
    hf = grpo_settings(config(max_turn_tokens=24, trl={"generation_kwargs": {"top_k": 5}}))
    assert hf["generation_kwargs"] == {"top_k": 5, "max_new_tokens": 24}
    assert hf["max_completion_length"] == 512  # the rollout's cap stays TRL's own
    vllm = grpo_settings(config(max_turn_tokens=24, trl={"use_vllm": True}))
    assert vllm["generation_kwargs"] == {"max_tokens": 24} and vllm["use_vllm"] is True
    with pytest.raises(ValueError, match="use max_turn_tokens alone"):
        config(max_turn_tokens=24, trl={"generation_kwargs": {"max_new_tokens": 8}})
    with pytest.raises(ValueError, match="must be a JSON object"):
        config(trl={"generation_kwargs": "{}"})
    with pytest.raises(ValueError, match="max_turn_tokens must be <= max_completion_length"):
        config(max_turn_tokens=600)


def test_runs_side_by_side_give_the_models_they_give_alone(start: Path, tmp_path: Path) -> None:
    """``train_many`` in worker processes: each run is a function of its config and start only
    (seeded by TRL, its own threads), so the study's arms may train two at a time."""
    from multiturn_envs.rl.training import train, train_many

    configs = {
        name: _config(tmp_path / name, reward=reward, seed=seed)
        for name, reward, seed in (("outcome", "outcome", 1), ("process", "process", 2))
    }
    together = train_many(configs, start, jobs=2)
    alone = train(_config(tmp_path / "alone", reward="process", seed=2), start=start)
    assert set(together) == {"outcome", "process"}
    assert together["process"].model_dir == tmp_path / "process" / "final"
    assert together["process"].log[0]["reward"] == alone.log[0]["reward"]
    assert not _moved(_weights(together["process"].model_dir), _weights(alone.model_dir))
    assert _moved(_weights(together["outcome"].model_dir), _weights(alone.model_dir))


def test_a_failed_run_side_by_side_is_named(start: Path, tmp_path: Path) -> None:
    from multiturn_envs.rl.training import train_many

    configs = {
        "ok": _config(tmp_path / "ok"),
        "broken": _config(tmp_path / "broken", trl={"no_such_grpo_field": 1}),  # TypeError
    }
    with pytest.raises(RuntimeError, match=r"training run 'broken' failed.*no_such_grpo_field"):
        train_many(configs, start, jobs=2)


# ------------------------------------------------------------ the trained model, evaluated
def test_harness_plays_and_scores_the_model_in_its_tool_layout(start: Path, tmp_path: Path) -> None:
    """Episodes continue token for token (the model sees its own calls, as in TRL), and
    re-scoring an action as its tool call gives back the log-prob the model generated it with."""
    import gymnasium as gym

    from multiturn_envs.harness import EvalConfig, read_run, run_eval, score_run
    from multiturn_envs.rl.evaluate import tool_layout_policy, tool_layout_scorer

    config = _config(tmp_path)
    policy = tool_layout_policy(start, config, name="start", temperature=1.0)
    path = tmp_path / "eval.jsonl"
    run_eval(
        EvalConfig(
            env_id=config.env_id,
            policy="start",
            tasks=TASKS,
            samples=6,
            max_turns=4,
            seed=0,
            env_kwargs=config.env_kwargs,
        ),
        policy,
        str(path),
        progress=False,
    )
    run = read_run(path)
    later = [t for r in run.records for t in r["turn_tokens"][1:]]
    assert later and all(t["prompt_continued"] for t in later)
    scorer = tool_layout_scorer(start, config, "start")
    reply_text = scorer.prompter.tokenizer.reply_text
    eos = scorer.prompter.tokenizer.eos_token_id

    def env() -> gym.Env[str, str]:
        return gym.make(config.env_id, max_turns=4, **config.env_kwargs)

    compared = 0
    for record, scored in zip(run.records, score_run(scorer, run, env)):
        for tokens, action, logprobs in zip(
            record["turn_tokens"], record["actions"], scored.token_logprobs
        ):
            canonical = [*scorer.prompter.encode(reply_text(action)), eos]
            if tokens["ids"] != canonical:
                break  # from here on the contexts differ: the model saw its own odd reply
            assert logprobs == pytest.approx(tokens["logprobs"], abs=1e-4)
            compared += 1
    assert compared >= 10


@pytest.mark.parametrize("template_kwargs", [{}, {"enable_thinking": False}])
def test_a_tool_call_is_scored_as_the_template_renders_it(
    start: Path, template_kwargs: dict[str, Any]
) -> None:
    """Qwen3's template (as the GPU configs use it): the scored reply is exactly the text the
    template puts between the generation prompt and EOS, under the run's template variables."""
    from trl.chat_template_utils import qwen3_chat_template

    from multiturn_envs.policies.prompting import ChatPrompter
    from multiturn_envs.rl.models import load_model
    from multiturn_envs.rl.run_view import RunView
    from multiturn_envs.rl.tool_format import ToolLayoutTokenizer

    _, tokenizer = load_model(str(start))
    tokenizer.chat_template = qwen3_chat_template
    view = ToolLayoutTokenizer(tokenizer, RunView.of(_config(start)).tool_functions())
    prompter = ChatPrompter(view, system_prompt="", chat_template_kwargs=template_kwargs)
    chat = [
        {"role": "user", "content": "first observation"},
        {"role": "assistant", "content": "Down"},
        {"role": "user", "content": "second observation"},
        {"role": "assistant", "content": "Right"},
    ]
    reply = view.reply_text("Right", **template_kwargs)
    context = prompter.render(chat[:3], True)
    assert prompter.render(chat, False).startswith(context + reply + tokenizer.eos_token)
    assert reply.startswith("<tool_call>") == bool(template_kwargs)  # no second think block
    seq = prompter.sequence_of(chat, last_only=True)
    ((a, b),) = seq.spans
    assert tokenizer.decode(seq.token_ids[a:b]) == reply + tokenizer.eos_token
