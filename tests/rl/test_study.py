"""The study in miniature (the README's main job) end to end, at a size that runs in a minute:
every stage runs, the report holds every analysis, and a rerun reuses finished stages."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.testing import require_packages

pytestmark = pytest.mark.timeout(1800)  # trains, or runs whole evaluations: long

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

STUDY = Path(__file__).resolve().parents[2] / "examples" / "study"


def _study_module() -> Any:
    require_packages("trl", "torch", "transformers", "datasets", "matplotlib")
    spec = importlib.util.spec_from_file_location("study_example", STUDY / "study.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["study_example"] = module
    spec.loader.exec_module(module)
    return module


def _small(config: dict[str, Any]) -> dict[str, Any]:
    small = copy.deepcopy(config)
    small.update(train_maps=4, eval_maps=4, n_boot=50, same_state_actions=4)
    small.update(same_state_max_states=4, continuation={"error_after": 1, "samples": 1})
    small.update(train_extra_layouts=False, agreement_episodes=4)
    small["base"].update(sft_steps=6, sft_episodes=8, steps=2, save_steps=1, batch_size=8)
    small["base"].update(num_generations=4)
    small["arms"] = {"outcome": {"reward": "outcome"}, "gigpo": {"reward": "gigpo"}}
    small["eval"]["samples"] = 2
    return small


def test_the_study_runs_every_stage_and_reports_every_analysis(tmp_path: Path) -> None:
    study = _study_module()
    config = _small(json.loads((STUDY / "config.json").read_text()))
    train, held_out = study.split_maps(config)
    assert len(train) == len(held_out) == 4
    layouts = {study.random_map(3, config["map_p"], int(t.rsplit("n", 1)[1])) for t in train}
    assert not layouts & {
        study.random_map(3, config["map_p"], int(t.rsplit("n", 1)[1])) for t in held_out
    }
    summary = study.run_study(config, tmp_path, lambda text: None, jobs=2)  # arms side by side
    assert set(summary["headline_pass1_tmax"]) == {"outcome", "gigpo"}
    agreement = summary["base_agreement"]["held_out"]
    assert agreement["states"] > 0 and 0.0 <= agreement["sampled"] <= 1.0
    gap = summary["gap_surfaces"]["outcome"]  # arm - base, the heatmaps' direction
    assert gap["ks"] == [1, 2] and gap["ts"] == list(range(1, config["t_max"] + 1))
    assert summary["best_arm"] in {"outcome", "gigpo"}
    report = (tmp_path / "report.md").read_text()
    for section in (
        "## Paper vs miniature",
        "Difference outcome - base",
        "## Headline",
        "## Pass@(K,T) surfaces",
        "## Same-state comparison",
        "## Same-state comparison on injected-error states",
        "## Error-state continuation",
        "## Action NLL and cumulative LLR",
        "## Training dynamics",
    ):
        assert section in report
    likelihood = report.split("## Action NLL")[1].split("## Training dynamics")[0]
    assert "not computed" not in likelihood and "LLR" in likelihood
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert "dynamics.png" in pngs and len(pngs) >= 2
    for png in pngs:
        assert f"]({png})" in report
    # a rerun reuses the base, the arms and the evaluations (files untouched): same headline
    kept = [
        tmp_path / "base" / "model" / "config.json",
        *(tmp_path / "arms" / arm / "final" / "config.json" for arm in config["arms"]),
        *(tmp_path / f"eval-{name}.jsonl" for name in ("base", *config["arms"])),
    ]
    stamps = {path: path.stat().st_mtime_ns for path in kept}
    again = study.run_study(config, tmp_path, lambda text: None)
    assert again["headline_pass1_tmax"] == summary["headline_pass1_tmax"]
    assert again["base_agreement"] == summary["base_agreement"]
    # the base-only check reuses the base and its evaluation
    alone = study.run_base(config, tmp_path, lambda text: None)
    assert alone["agreement"] == summary["base_agreement"]
    assert (
        alone["pass1_tmax"]["estimate"]
        == summary["headline_pass1_tmax"]["outcome"]["base"]["estimate"]
    )
    assert {path: path.stat().st_mtime_ns for path in kept} == stamps
    # an arm whose config changed is trained and evaluated again; nothing else is
    changed = copy.deepcopy(config)
    changed["arms"]["outcome"]["steps"] = 1
    third = study.run_study(changed, tmp_path, lambda text: None)
    assert len(third["train_logs"]["outcome"]) == 1 and len(third["train_logs"]["gigpo"]) == 2
    redone = {
        tmp_path / "arms" / "outcome" / "final" / "config.json",
        tmp_path / "eval-outcome.jsonl",
    }
    for path in kept:
        assert (path.stat().st_mtime_ns != stamps[path]) == (path in redone), path


def test_the_study_config_is_read_within_bounds(tmp_path: Path) -> None:
    """The study's config is a file anyone may hand it (issue 29): types and ranges checked,
    the field named, before any work."""
    import pytest

    from multiturn_envs.errors import UntrustedInputError

    study = _study_module()
    assert study.read_config(STUDY / "config.json") == json.loads(
        (STUDY / "config.json").read_text()
    )
    good = json.loads((STUDY / "config.json").read_text())
    for field, value, match in [
        ("t_max", "6", "t_max must be a whole number"),
        ("map_p", float("nan"), "map_p must be a number"),
        ("n_boot", 10**12, "n_boot must be a whole number"),
        ("arms", [], "arms must be a table"),
        ("eval", {"samples": -1}, "eval.samples must be a whole number"),
    ]:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**good, field: value}))
        with pytest.raises(UntrustedInputError, match=match):
            study.read_config(path)
    (tmp_path / "deep.json").write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(UntrustedInputError, match="nested"):
        study.read_config(tmp_path / "deep.json")
