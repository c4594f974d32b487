"""`multiturn-envs nll` and `llr` end to end on MT/Terminal-v0 records, with the tiny model.

A real run (noisy expert, a few bundled tasks) is written by the harness, then scored through
the CLI: the records are replayed on fresh containers (rewards must match) and every action
is scored under tiny chat models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import multiturn_envs  # noqa: F401  (registers MT/* ids)
from multiturn_envs.cli import main
from multiturn_envs.harness import EvalConfig, run_eval
from multiturn_envs.harness.records import read_run
from multiturn_envs.policies.baselines import NoisyExpertPolicy
from multiturn_envs.testing import require_model, require_terminal_image

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
pytestmark = pytest.mark.docker
TERMINAL = "MT/Terminal-v0"


def test_nll_and_llr_on_terminal_records(tmp_path: Path) -> None:
    require_terminal_image()
    require_model("tiny")
    import torch

    torch.set_num_threads(1)
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model

    records = tmp_path / "terminal.jsonl"
    config = EvalConfig(
        env_id=TERMINAL,
        policy="noisy-expert:0.5",
        tasks=["count-errors", "rename-extensions"],
        samples=2,
        max_turns=3,
        seed=5,
    )
    # two env instances: each holds its own warm container and checker
    run_eval(config, NoisyExpertPolicy(0.5), str(records), progress=False, in_flight=2)
    run = read_run(records)
    assert len(run.records) == 4
    outcomes = {bool(r["success"]) for r in run.records}
    assert outcomes == {True, False}, "the fixture run must mix successes and failures"
    a = build_tiny_chat_model(tmp_path / "a", seed=0)
    b = build_tiny_chat_model(tmp_path / "b", seed=1)
    out = tmp_path / "nll.json"
    assert (
        main(
            [
                "nll",
                str(records),
                "--scoring-model",
                f"hf:{a}",
                "--bootstrap",
                "50",
                "--json-out",
                str(out),
            ]
        )
        == 0
    )
    nll = json.loads(out.read_text())
    text = json.dumps(nll)
    assert "success" in text and "failure" in text
    out = tmp_path / "llr.json"
    args = ["llr", str(records), "--model-a", f"hf:{a}", "--model-b", f"hf:{b}"]
    assert main([*args, "--bootstrap", "50", "--json-out", str(out)]) == 0
    assert "success" in json.loads(out.read_text()).__repr__()
