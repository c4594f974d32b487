"""The study in miniature (the README's main job) end to end, at a size that runs in a minute:
every stage runs, the report holds every analysis, and a rerun reuses finished stages."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
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


def study_module() -> Any:
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
    small["default_arms"] = ["outcome", "gigpo"]
    small["headline"] = {**small["headline"], "arm": "outcome", "n_boot": 200}
    for claim in small["headline"]["claims"]:
        claim.update({"wide_k": 2} if "wide_k" in claim else {})
    small["eval"]["samples"] = 2
    small["dynamics_samples"] = 2
    return study_module().choose_arms(small)


def test_the_study_runs_every_stage_and_reports_every_analysis(tmp_path: Path) -> None:
    study = study_module()
    out = tmp_path / "seed-0"
    config = _small(json.loads((STUDY / "config.json").read_text()))
    train, held_out = study.split_maps(config)
    assert len(train) == len(held_out) == 4
    layouts = {study.random_map(3, config["map_p"], int(t.rsplit("n", 1)[1])) for t in train}
    assert not layouts & {
        study.random_map(3, config["map_p"], int(t.rsplit("n", 1)[1])) for t in held_out
    }
    summary = study.run_study(config, out, lambda text: None, jobs=2)  # arms side by side
    assert set(summary["headline_pass1_tmax"]) == {"outcome", "gigpo"}
    agreement = summary["base_agreement"]["held_out"]
    assert agreement["states"] > 0 and 0.0 <= agreement["sampled"] <= 1.0
    gap = summary["gap_surfaces"]["outcome"]  # arm - base, the heatmaps' direction
    assert gap["ks"] == [1, 2] and gap["ts"] == list(range(1, config["t_max"] + 1))
    assert summary["rl_arm"] == "outcome"  # pre-registered, whichever arm did better
    fingerprint = summary["fingerprint"]
    import torch

    assert fingerprint["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert fingerprint["seed"] == config["seed"] and fingerprint["threads"] >= 1
    assert (
        fingerprint["config_digest"]
        == study.run_fingerprint(study.pooling_config(config), seed=0)["config_digest"]
    )
    per_map = summary["per_map"]
    assert per_map["tasks"] == held_out and set(per_map["surfaces"]) == {"base", "outcome", "gigpo"}
    assert len(summary["same_state_outcomes"]["normal"]) == summary["same_state_normal"]["n_states"]
    report = (out / "report.md").read_text()
    for section in (
        "## Paper vs miniature",
        "Difference outcome - base",
        "## Pass@(1,T_max) on held-out maps, arm - base",
        "| torch CPU capability | " + fingerprint["cpu_capability"],
        "| config digest | `" + fingerprint["config_digest"],
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
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "dynamics.png" in pngs and len(pngs) >= 2
    for png in pngs:
        assert f"]({png})" in report
    # a rerun reuses the base, the arms and the evaluations (files untouched): same headline
    kept = [
        out / "base" / "model" / "config.json",
        *(out / "arms" / arm / "final" / "config.json" for arm in config["arms"]),
        *(out / f"eval-{name}.jsonl" for name in ("base", *config["arms"])),
    ]
    stamps = {path: path.stat().st_mtime_ns for path in kept}
    again = study.run_study(config, out, lambda text: None)
    assert again["headline_pass1_tmax"] == summary["headline_pass1_tmax"]
    assert again["base_agreement"] == summary["base_agreement"]
    # the base-only check reuses the base and its evaluation
    alone = study.run_base(config, out, lambda text: None)
    assert alone["agreement"] == summary["base_agreement"]
    assert (
        alone["pass1_tmax"]["estimate"]
        == summary["headline_pass1_tmax"]["outcome"]["base"]["estimate"]
    )
    assert {path: path.stat().st_mtime_ns for path in kept} == stamps
    # an arm whose config changed is trained and evaluated again; nothing else is
    changed = copy.deepcopy(config)
    changed["arms"]["outcome"]["steps"] = 1
    third = study.run_study(changed, out, lambda text: None)
    assert len(third["train_logs"]["outcome"]) == 1 and len(third["train_logs"]["gigpo"]) == 2
    redone = {
        out / "arms" / "outcome" / "final" / "config.json",
        out / "eval-outcome.jsonl",
    }
    for path in kept:
        assert (path.stat().st_mtime_ns != stamps[path]) == (path in redone), path
    # a run under another float path (or package set) does not reuse the folder's stages
    recorded = json.loads((out / "float_path.json").read_text())
    (out / "float_path.json").write_text(json.dumps({**recorded, "cpu_capability": "OTHER"}))
    base_stamp = (out / "base" / "model" / "config.json").stat().st_mtime_ns
    study.run_base(changed, out, lambda text: None)
    assert (out / "base" / "model" / "config.json").stat().st_mtime_ns != base_stamp
    assert json.loads((out / "float_path.json").read_text()) == recorded

    # spread.py pools seeds of one config (another float path is fine, and shown), and
    # refuses seeds of another config
    summary_path = out / "summary.json"
    other_path = json.loads(summary_path.read_text())
    other_path["fingerprint"]["cpu_capability"] = "OTHER"
    (tmp_path / "seed-1").mkdir()
    (tmp_path / "seed-1" / "summary.json").write_text(json.dumps(other_path))
    pooled = _spread(tmp_path, "0", "1")
    assert pooled.returncode == 0, pooled.stderr
    for part in (
        "## Conclusion",
        "Pooled over 2 seeds (0, 1) and the 4 held-out maps",
        "2 float paths",
    ):
        assert part in pooled.stdout
    claims = pooled.stdout.split("## Conclusion")[1].split("##")[0]
    for i, claim in enumerate(config["headline"]["claims"], 1):
        assert f"{i}. {claim['statement'].replace('T_max', '6')} (" in claims
    assert claims.count("**holds**") + claims.count("**not shown**") + claims.count(
        "**reversed**"
    ) == len(config["headline"]["claims"])
    other_config = json.loads(summary_path.read_text())
    other_config["fingerprint"]["config_digest"] = "0123456789abcdef"
    (tmp_path / "seed-2").mkdir()
    (tmp_path / "seed-2" / "summary.json").write_text(json.dumps(other_config))
    refused = _spread(tmp_path, "0", "1", "2")
    assert refused.returncode == 2 and not refused.stdout
    assert "configs differ" in refused.stderr and "seeds 0, 1" in refused.stderr
    assert "config 0123456789abcdef: seeds 2" in refused.stderr


def _spread(out: Path, *seeds: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(STUDY / "spread.py"), str(out), *seeds],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({}, "neither"),
        ({"summary.json": "{not json"}, "not readable JSON"),
        ({"summary.json": "[" * 5000 + "]" * 5000}, "not readable JSON"),
        ({"summary.json": "[1, 2]"}, "no fingerprint"),
        ({"summary.json": json.dumps({"headline_pass1_tmax": {}})}, "no fingerprint"),
        ({"base_summary.json": json.dumps({"fingerprint": {"config_digest": "x"}})}, "lacks"),
    ],
)
def test_spread_refuses_what_it_cannot_pool_with_one_line(
    tmp_path: Path, files: dict[str, str], words: str
) -> None:
    folder = tmp_path / "seed-0"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    found = _spread(tmp_path, "0")
    assert found.returncode == 2 and not found.stdout
    assert words in found.stderr and len(found.stderr.strip().splitlines()) == 1
    assert "Traceback" not in found.stderr


def test_spread_never_waits_on_a_summary_that_is_not_a_file(tmp_path: Path) -> None:
    """A FIFO where a summary should be (nothing will ever write it) is refused at once: a
    bounded reader of regular files only, not a read that blocks."""
    (tmp_path / "seed-0").mkdir()
    os.mkfifo(tmp_path / "seed-0" / "summary.json")
    found = _spread(tmp_path, "0")
    assert found.returncode == 2 and "not readable JSON" in found.stderr


def test_spread_without_seeds_says_how_to_call_it(tmp_path: Path) -> None:
    found = _spread(tmp_path)
    assert found.returncode == 2 and "usage: spread.py OUT SEED" in found.stderr


def test_the_config_names_its_pre_registered_arm_and_a_run_chooses_its_arms() -> None:
    study = study_module()
    config = json.loads((STUDY / "config.json").read_text())
    default = study.choose_arms(config)
    assert list(default["arms"]) == config["default_arms"] == [config["headline"]["arm"]]
    assert "default_arms" not in default
    assert list(study.choose_arms(config, "all")["arms"]) == list(config["arms"])
    assert list(study.choose_arms(config, "gigpo, outcome-T6")["arms"]) == ["outcome-T6", "gigpo"]
    with pytest.raises(ValueError, match="pre-registered RL arm 'outcome-T6' must run"):
        study.choose_arms(config, "gigpo")
    with pytest.raises(ValueError, match="config's arms are"):
        study.choose_arms(config, "outcome-T6,nope")
    # a claim spread.py could not judge is refused before any work
    samples = config["eval"]["samples"]
    for claim, words in (
        ({"statement": "x", "figure": "nope", "above": 0}, "claim figure 'nope'"),
        ({"statement": "x", "figure": "gap", "above": 0, "below": 1}, "exactly one of"),
        ({"statement": "x", "figure": "gap_k_contrast", "above": 0}, "give wide_k"),
        ({"statement": "x", "figure": "gap", "k": samples + 1, "above": 0}, "1..eval.samples"),
        ({"figure": "gap", "above": 0}, "needs its statement"),
        ({"statement": "x", "figure": "gap", "above": float("nan")}, "above must be a number"),
        ({"statement": "x", "figure": "gap", "below": "0"}, "below must be a number"),
        ({"statement": "x", "figure": "gap", "k": 1.9, "above": 0}, "k must be a whole number"),
    ):
        with pytest.raises(ValueError, match=words):
            study.check_claim(claim, samples)
    # seed and thread count are not part of what must match to pool runs; the arms are
    pooled = study.pooling_config({**default, "seed": 3})
    assert pooled == study.pooling_config({**default, "base": {**default["base"], "threads": 2}})
    assert pooled != study.pooling_config(study.choose_arms(config, "all"))


def test_the_study_config_is_read_within_bounds(tmp_path: Path) -> None:
    """The study's config is a file anyone may hand it (issue 29): types and ranges checked,
    the field named, before any work."""
    from multiturn_envs.errors import UntrustedInputError

    study = study_module()
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


def test_a_folder_the_study_did_not_make_is_left_untouched(tmp_path: Path) -> None:
    """``--out`` at a folder of the user's (here one with a ``base/`` and an ``eval-base.jsonl``
    of its own): refused before any stage, every file as it was; the command says so in one
    line. A new or empty folder is taken, and the study's own folder is taken again."""
    study = study_module()
    out = tmp_path / "mine"
    (out / "base").mkdir(parents=True)
    files = {out / "base" / "notes.txt": "my notes\n", out / "eval-base.jsonl": "my rows\n"}
    for path, text in files.items():
        path.write_text(text)
    config = _small(json.loads((STUDY / "config.json").read_text()))
    with pytest.raises(study.NotAStudyFolder, match="new or empty folder"):
        study.run_base(config, out, lambda text: None)
    proc = subprocess.run(
        [sys.executable, str(STUDY / "study.py"), "--out", str(out), "--base-only"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"study: {out} is not a folder this study made (it holds files and no "
        "float_path.json); give --out a new or empty folder"
    ]
    assert sorted(p for p in out.rglob("*") if p.is_file()) == sorted(files)
    assert all(path.read_text() == text for path, text in files.items())
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(study.NotAStudyFolder):
        study.check_float_path(tmp_path / "a-file", study.study_fingerprint(config), print)
    fingerprint = study.study_fingerprint(config)
    for fresh in (tmp_path / "new", tmp_path / "empty"):
        if fresh.name == "empty":
            fresh.mkdir()
        study.check_float_path(fresh, fingerprint, print)
        study.check_float_path(fresh, fingerprint, print)  # its own folder, taken again
        assert [p.name for p in fresh.iterdir()] == ["float_path.json"]


def test_a_bookkeeping_file_cut_short_redoes_its_stage(tmp_path: Path) -> None:
    """The study's own JSON files (float path, start config, agreement) cut while written, or
    not a file: the stage they describe is redone, never a traceback on every rerun."""
    study = study_module()
    config = _small(json.loads((STUDY / "config.json").read_text()))
    fingerprint = study.study_fingerprint(config)
    out = tmp_path / "seed-0"
    study.check_float_path(out, fingerprint, print)  # the study's folder from now on
    (out / "base").mkdir()
    (out / "base" / "weights").write_text("made under the old path")
    (out / "float_path.json").write_text('{"packages": {"torch": ')  # cut while written
    said: list[str] = []
    study.check_float_path(out, fingerprint, said.append)
    assert len(said) == 1 and "float_path.json unreadable" in said[0]
    assert not (out / "base").exists()
    want = {k: fingerprint[k] for k in study.FLOAT_PATH_FIELDS}
    assert json.loads((out / "float_path.json").read_text()) == want
    (out / "start.json").write_text('{"lr": ')
    os.mkfifo(out / "fifo.json")
    (out / "ok.json").write_text(json.dumps({"lr": 0.1, "maps": [1, 2]}))
    assert not study._same_config(out / "start.json", {"lr": 0.1})
    assert not study._same_config(out / "fifo.json", {"lr": 0.1})  # refused, never a block
    assert not study._same_config(out / "missing.json", {"lr": 0.1})
    assert study._same_config(out / "ok.json", {"lr": 0.1, "maps": (1, 2)})
