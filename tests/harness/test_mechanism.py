"""Action NLL and cumulative LLR against a plain, independent teacher-forced computation.

The reference computation below shares nothing with the library's scoring path: it replays
each record on a fresh env by hand, renders every action's context with the tokenizer's chat
template *per action* (not incrementally), and sums ``log_softmax`` of one forward pass at the
action's token positions.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import multiturn_envs  # noqa: F401  (registers MT/* ids)
from multiturn_envs.cli import main
from multiturn_envs.harness import (
    EvalConfig,
    action_nll,
    pair_llr,
    ratio_interval,
    read_run,
    replay_trajectories,
    run_eval,
    score_generated,
    score_run,
    trajectory_llr,
)
from multiturn_envs.policies import ScoringModel, ensure_comparable, load_scoring_model
from multiturn_envs.policies.baselines import NoisyExpertPolicy
from multiturn_envs.policies.conversation import build_conversation
from multiturn_envs.policies.token_sequences import ScoringSequence
from multiturn_envs.testing import require_packages

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
FROZEN = "MT/FrozenLake-v0"


def _require_llm() -> None:
    require_packages("torch", "transformers", "tokenizers")
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny chat models with the same tokenizer and different weights (seeds 0 and 1)."""
    _require_llm()
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model

    root = tmp_path_factory.mktemp("mech_lm")
    return build_tiny_chat_model(root / "a", seed=0), build_tiny_chat_model(root / "b", seed=1)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run with successes and failures: noisy expert on non-slippery FrozenLake."""
    out = tmp_path_factory.mktemp("mech_runs") / "noisy.jsonl"
    config = EvalConfig(
        env_id=FROZEN,
        policy="noisy-expert:0.4",
        tasks=[f"random-s4-p0.8-n{i}" for i in range(3)],
        samples=2,
        max_turns=8,
        seed=3,
        env_kwargs={"is_slippery": False},
    )
    run_eval(config, NoisyExpertPolicy(0.4), str(out), progress=False)
    return out


def direct_logprobs(folder: Path, path: Path) -> list[list[float]]:
    """Per trajectory, per action, log p(action + EOS | context): one forward pass per action."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    run = read_run(path)
    out = []
    for rec in run.records:
        env = gym.make(
            FROZEN, max_turns=rec["max_turns"], disable_env_checker=True, **run.config["env_kwargs"]
        )
        env.reset(seed=rec["seed"], options={"task_id": rec["task_id"]})
        system = env.unwrapped.system_prompt()
        per_action = []
        for action in rec["actions"]:
            history = env.unwrapped.messages()
            context = [{"role": "system", "content": system}, *history]
            text = tok.apply_chat_template(context, tokenize=False, add_generation_prompt=True)
            prompt = tok.encode(text, add_special_tokens=False)
            act = [*tok.encode(action, add_special_tokens=False), tok.eos_token_id]
            ids = torch.tensor([prompt + act])
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
            per_action.append(float(sum(logp[len(prompt) + i - 1, t] for i, t in enumerate(act))))
            env.step(action)
        env.close()
        out.append(per_action)
    return out


def test_replay_rebuilds_the_conversation_and_refuses_a_diverging_record(records: Path) -> None:
    run = read_run(records)
    make = lambda: gym.make(FROZEN, disable_env_checker=True, is_slippery=False)  # noqa: E731
    texts = replay_trajectories(make, run.records)
    assert len(texts) == len(run.records)
    for text, rec in zip(texts, run.records):
        assert [text.messages[i]["content"] for i in text.action_index] == rec["actions"]
        assert text.messages[0]["role"] == "user" and text.messages[-1]["role"] == "assistant"
        assert len(set(text.systems)) == 1 and "FrozenLake" in text.systems[0]
    bad = json.loads(json.dumps(run.records[0]))
    bad["rewards"][-1] = 1.0 - bad["rewards"][-1]
    with pytest.raises(ValueError, match="replay diverged"):
        replay_trajectories(make, [bad])


def test_replay_of_error_injected_records_scores_only_the_policy_actions(
    tmp_path: Path, tiny_dirs: tuple[Path, Path]
) -> None:
    out = tmp_path / "inj.jsonl"
    config = EvalConfig(
        env_id=FROZEN,
        policy="noisy-expert:0.3",
        tasks=[f"random-s4-p0.8-n{i}" for i in range(3)],
        samples=2,
        max_turns=5,
        error_after=1,
        seed=1,
    )
    run_eval(config, NoisyExpertPolicy(0.3), str(out), progress=False)
    run = read_run(out)
    texts = replay_trajectories(lambda: gym.make(FROZEN, disable_env_checker=True), run.records)
    for text, rec in zip(texts, run.records):
        injected = rec["error_injection"]["injected_actions"]
        assistants = [m["content"] for m in text.messages if m["role"] == "assistant"]
        assert assistants == [*injected, *rec["actions"]]
        assert text.n_actions == len(rec["actions"])
    # one sequence per trajectory (prefix spans dropped) == each action scored on its own
    model = load_scoring_model(f"hf:{tiny_dirs[0]}")
    whole = model.score(texts)
    for text, per_action in zip(texts, whole):
        for k, i in enumerate(text.action_index):
            conv = build_conversation(text.messages[: i + 1], text.systems[k])
            seq = model.prompter.sequence_of(conv)
            alone = model.scorer.score([ScoringSequence(seq.token_ids, seq.spans[-1:])])[0][0]
            assert per_action[k] == pytest.approx(alone, abs=1e-4)


def test_nll_equals_a_direct_forward_pass(tiny_dirs: tuple[Path, Path], records: Path) -> None:
    folder = tiny_dirs[0]
    model = load_scoring_model(f"hf:{folder}")
    scored = score_run(model, read_run(records))
    direct = direct_logprobs(folder, records)
    assert [s.action_logprobs for s in scored] == [pytest.approx(d, abs=2e-4) for d in direct]
    summary = action_nll(scored, n_boot=200)
    tokens = sum(len(a) for s in scored for a in s.token_logprobs)
    actions = sum(len(d) for d in direct)
    total = -sum(map(sum, direct))
    assert summary["all"].n_tokens == tokens and summary["all"].n_actions == actions
    assert summary["all"].per_token.estimate == pytest.approx(total / tokens, rel=1e-5)
    assert summary["all"].per_action.estimate == pytest.approx(total / actions, rel=1e-5)
    successes = [i for i, r in enumerate(read_run(records).records) if r["success"]]
    assert 0 < len(successes) < len(scored), "the fixture run must mix successes and failures"
    s_total = -sum(sum(direct[i]) for i in successes)
    s_actions = sum(len(direct[i]) for i in successes)
    assert summary["success"].per_action.estimate == pytest.approx(s_total / s_actions, rel=1e-5)
    assert summary["success"].n_trajectories + summary["failure"].n_trajectories == len(scored)
    iv = summary["all"].per_token
    assert iv.low <= iv.estimate <= iv.high


def test_llr_of_a_model_against_itself_is_zero_and_otherwise_the_direct_difference(
    tiny_dirs: tuple[Path, Path], records: Path
) -> None:
    a = load_scoring_model(f"hf:{tiny_dirs[0]}")
    b = load_scoring_model(f"hf:{tiny_dirs[1]}")
    run = read_run(records)
    sa, sb = score_run(a, run), score_run(b, run)
    self_llr = trajectory_llr(pair_llr(sa, sa), n_boot=100)
    for group in ("all", "success", "failure"):
        mean = self_llr[group].mean
        assert mean.estimate == 0.0
        if self_llr[group].n_tasks > 1:  # one task: no interval (NaN), never a fake [x, x]
            assert (mean.low, mean.high) == (0.0, 0.0)
        else:
            assert math.isnan(mean.low) and math.isnan(mean.high)
    pairs = pair_llr(sa, sb)
    da, db = direct_logprobs(tiny_dirs[0], records), direct_logprobs(tiny_dirs[1], records)
    for p, x, y in zip(pairs, da, db):
        assert p.llr == pytest.approx(sum(x) - sum(y), abs=5e-4)
    summary = trajectory_llr(pairs, n_boot=100)
    expected = np.mean([sum(x) - sum(y) for x, y in zip(da, db)])
    assert summary["all"].mean.estimate == pytest.approx(expected, abs=5e-4)
    assert summary["all"].median == pytest.approx(
        float(np.median([sum(x) - sum(y) for x, y in zip(da, db)])), abs=5e-4
    )
    anti = trajectory_llr(pair_llr(sb, sa), n_boot=100)
    assert anti["all"].mean.estimate == pytest.approx(-summary["all"].mean.estimate)


def test_llr_refuses_two_engines_or_dtypes(tiny_dirs: tuple[Path, Path]) -> None:
    a = load_scoring_model(f"hf:{tiny_dirs[0]}")
    b = load_scoring_model(f"hf:{tiny_dirs[1]},dtype=bfloat16")
    with pytest.raises(ValueError, match="ONE engine and dtype"):
        ensure_comparable(a, b)
    other = ScoringModel("x", "vllm", "float32", a.prompter, a.scorer)
    with pytest.raises(ValueError, match="ONE engine and dtype"):
        ensure_comparable(a, other)
    ensure_comparable(a, load_scoring_model(f"hf:{tiny_dirs[1]}"))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-50, 50), st.integers(1, 20)), min_size=1, max_size=12),
    st.integers(0, 2**31),
)
def test_ratio_interval_is_the_pooled_mean_within_the_unit_ratios(
    units: list[tuple[float, int]], seed: int
) -> None:
    num = np.array([u[0] for u in units])
    den = np.array([float(u[1]) for u in units])
    iv = ratio_interval(num, den, n_boot=200, seed=seed)
    assert iv.estimate == pytest.approx(num.sum() / den.sum())
    ratios = num / den
    if len(units) > 1:
        assert ratios.min() - 1e-9 <= iv.low <= iv.high <= ratios.max() + 1e-9
    if len(units) > 1 and np.allclose(ratios, ratios[0]):
        assert iv.low == pytest.approx(ratios[0]) and iv.high == pytest.approx(ratios[0])
    assert math.isnan(ratio_interval(np.array([]), np.array([])).estimate)


def test_cli_nll_and_llr(
    tiny_dirs: tuple[Path, Path], records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nll.json"
    spec = f"hf:{tiny_dirs[0]}"
    nll = ["nll", str(records), "--scoring-model", spec, "--bootstrap", "50"]
    assert main([*nll, "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Action NLL under" in printed and "NLL/token" in printed and "NLL/action" in printed
    payload = json.loads(out.read_text())
    direct = direct_logprobs(tiny_dirs[0], records)
    per_action = -sum(map(sum, direct)) / sum(map(len, direct))
    got = payload["runs"][0]["all"]["per_action"]["estimate"]
    assert got == pytest.approx(per_action, rel=1e-5)
    assert f"{per_action:.3f}" in printed

    out = tmp_path / "llr.json"
    args = ["llr", str(records), "--model-a", spec, "--model-b", spec, "--bootstrap", "50"]
    assert main([*args, "--json-out", str(out)]) == 0
    assert "Cumulative LLR" in capsys.readouterr().out
    assert json.loads(out.read_text())["runs"][0]["all"]["mean"]["estimate"] == 0.0

    bad = ["llr", str(records), "--model-a", spec, "--model-b", f"{spec},dtype=bfloat16"]
    assert main(bad) == 2
    assert "ONE engine and dtype" in capsys.readouterr().err
    assert main(["nll", str(records), "--scoring-model", f"hf:{spec[3:]},colour=red"]) == 2
    assert "unknown option 'colour'" in capsys.readouterr().err
    assert main(["nll", str(tmp_path / "missing.jsonl"), "--scoring-model", spec]) == 2


def test_eval_runs_an_hf_policy_spec_and_records_its_logprobs(
    tiny_dirs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tiny.jsonl"
    spec = f"hf:{tiny_dirs[0]},max_tokens=6,temperature=0.7,top_p=0.9"
    args = ["eval", FROZEN, "--policy", spec, "--tasks", "2", "--samples", "2", "-t", "3", "-q"]
    assert main([*args, "--out", str(out)]) == 0
    run = read_run(out)
    assert len(run.records) == 4
    for rec in run.records:
        assert rec["action_logprobs"] is not None and len(rec["action_logprobs"]) == rec["turns"]
        assert all(lp is not None and lp <= 0 for lp in rec["action_logprobs"])
    # the junk the tiny model writes is scored like any other recorded action
    model = load_scoring_model(f"hf:{tiny_dirs[0]}")
    scored = score_run(model, run)
    assert all(len(s.token_logprobs) == r["turns"] for s, r in zip(scored, run.records))
    # the record keeps each turn's generated ids: scoring them gives back what was recorded
    exact = score_generated(model, run)
    for got, rec in zip(exact, run.records):
        recorded = [t["logprobs"] for t in rec["turn_tokens"]]
        assert [len(t["ids"]) for t in rec["turn_tokens"]] == [len(x) for x in recorded]
        assert got.token_logprobs == [pytest.approx(x, abs=2e-4) for x in recorded]
        assert got.action_logprobs == pytest.approx(rec["action_logprobs"], abs=1e-3)
        assert all(t["finish_reason"] in ("stop", "length") for t in rec["turn_tokens"])
    random_run = tmp_path / "random.jsonl"
    assert (
        main(["eval", FROZEN, "--policy", "random", "--tasks", "1", "-q", "--out", str(random_run)])
        == 0
    )
    assert read_run(random_run).records[0]["turn_tokens"] is None
    with pytest.raises(ValueError, match="no turn_tokens"):
        score_generated(model, read_run(random_run))
    capsys.readouterr()
    assert main(["eval", FROZEN, "--policy", "hf:/no/such/folder", "-q"]) == 2
    assert "hf:/no/such/folder" in capsys.readouterr().err
