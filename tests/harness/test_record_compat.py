"""Record files written by earlier versions of this package still load and analyse.

``tests/harness/data/v1_*.jsonl`` were written by the schema-1 code before the harness was
restructured (random policy with error injection; announced budgets; a tiny HF model with
per-turn token ids). Reading, reporting, replaying to states and conversations, and exact
scoring of generated ids must all work on them, unchanged.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from multiturn_envs.harness import (
    READABLE_SCHEMAS,
    env_factory_of,
    main_report,
    read_run,
    replay_trajectories,
    states_from_records,
)
from multiturn_envs.testing import require_packages

DATA = Path(__file__).parent / "data"
FILES = sorted(DATA.glob("v1_*.jsonl"))


def test_the_fixtures_are_there() -> None:
    assert [f.name for f in FILES] == [
        "v1_random_announced.jsonl",
        "v1_random_error_after.jsonl",
        "v1_tiny_hf_tokens.jsonl",
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_old_files_read_replay_and_report(path: Path, tmp_path: Path) -> None:
    run = read_run(path)
    assert run.header["schema"] == 1 and 1 in READABLE_SCHEMAS and run.records
    config = run.config
    assert len(run.records) == len(config["tasks"]) * config["samples"] * (
        len(config["turn_grid"] or [0]) if config["budget_mode"] == "announced" else 1
    )
    make_env = env_factory_of(run)
    # every state the policy acted in, rebuilt exactly (the replay checks the rewards)
    states = states_from_records(make_env, run.records)
    assert len(states) == sum(len(r["actions"]) for r in run.records)
    texts = replay_trajectories(make_env, run.records)
    for text, record in zip(texts, run.records):
        actions = [text.messages[i]["content"] for i in text.action_index]
        assert actions == record["actions"]
        injection = record["error_injection"]
        injected = [] if injection is None else injection["injected_actions"]
        played = [m["content"] for m in text.messages if m["role"] == "assistant"]
        assert played == [*injected, *record["actions"]]  # the prefix, then the policy's turns
    report = main_report([str(path)], n_boot=50, plots=False)
    assert f"{len(config['tasks'])} tasks" in report
    env = make_env()
    assert isinstance(env, gym.Env)
    env.close()


def test_old_token_ids_score_back_to_their_logprobs() -> None:
    require_packages("torch", "transformers", "tokenizers")
    import tempfile

    import torch

    from multiturn_envs.harness import score_generated
    from multiturn_envs.policies import load_scoring_model
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model

    torch.set_num_threads(1)
    run = read_run(DATA / "v1_tiny_hf_tokens.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        # the model that wrote the file (seeded, reproducible; the init of its day: biases 1.0)
        build_tiny_chat_model(tmp, seed=0, qkv_bias=1.0)
        model = load_scoring_model(f"hf:{tmp}")
        scored = score_generated(model, run)
    worst = 0.0
    for record, traj in zip(run.records, scored):
        assert record["turn_tokens"] is not None
        for turn, got in zip(record["turn_tokens"], traj.token_logprobs):
            assert turn is not None and turn["logprobs"] is not None
            assert len(got) == len(turn["logprobs"])
            worst = max(worst, *(abs(a - b) for a, b in zip(got, turn["logprobs"])))
    assert worst < 2e-4
