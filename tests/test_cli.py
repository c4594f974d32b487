"""The console script: one clear line and exit 2 on user mistakes; eval -> report end to end."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from multiturn_envs.cli import main, parse_env_args
from multiturn_envs.harness.passk import pass_surface_from_first_success
from multiturn_envs.harness.records import read_run

FROZEN = "MT/FrozenLake-v0"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "multiturn_envs.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "MT/NoSuchEnv-v0"],
        ["eval", "nosuchmodule:MT/X-v0"],
        ["eval", FROZEN, "--samples", "0"],
        ["eval", FROZEN, "--samples", "many"],
        ["eval", FROZEN, "--policy", "genius"],
        ["eval", FROZEN, "--policy", "noisy-expert:lots"],
        ["eval", FROZEN, "--policy", "no_such_module:Policy"],
        ["eval", FROZEN, "--env-arg", "novalue"],
        ["eval", FROZEN, "--env-arg", "no_such_kwarg=3"],
        ["eval", FROZEN, "--tasks", "no-such-task"],
        ["eval", FROZEN, "--budget-mode", "secret"],
        ["eval", FROZEN, "--turn-grid", "1,2"],
        ["eval", FROZEN, "--seed", "-1"],
        ["frobnicate"],
        [],
        ["report", "/no/such/file.jsonl"],
        ["report"],
    ],
)
def test_user_mistakes_give_one_line_and_exit_2(
    args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main([*args] if args[:1] != ["eval"] else [*args, "--out", str(tmp_path / "x.jsonl")])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("multiturn-envs: error: ")
    assert "Traceback" not in captured.err
    assert not (tmp_path / "x.jsonl").exists()


def test_console_script_unknown_env_is_one_line_in_a_real_process() -> None:
    proc = run_cli("eval", "MT/NoSuchEnv-v0")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown env id 'MT/NoSuchEnv-v0'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_report_of_a_file_that_is_not_a_record_file(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text('{"hello": 1}\n')
    proc = run_cli("report", str(bogus))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "not a multiturn-envs record file" in proc.stderr


def test_resume_into_another_run_is_refused(tmp_path: Path) -> None:
    out = str(tmp_path / "r.jsonl")
    assert main(["eval", FROZEN, "--tasks", "2", "--samples", "2", "--out", out, "-q"]) == 0
    proc = run_cli("eval", FROZEN, "--tasks", "2", "--samples", "3", "--out", out, "-q")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "different run (samples: 2 in the file, 3 now)" in proc.stderr


def test_list_names_every_env_with_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith(FROZEN))
    assert len(line.split(None, 1)[1]) > 10


def test_env_args_are_json_when_they_parse() -> None:
    assert parse_env_args(["size=8", "slippery=false", "name=abc", "p=0.8", "xs=[1,2]"]) == {
        "size": 8,
        "slippery": False,
        "name": "abc",
        "p": 0.8,
        "xs": [1, 2],
    }


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_eval_then_report_numbers_equal_the_estimator(tmp_path: Path) -> None:
    out = tmp_path / "noisy.jsonl"
    code = main(
        ["eval", FROZEN, "--policy", "noisy-expert:0.5", "--tasks", "6", "--samples", "4",
         "--max-turns", "6", "--seed", "1", "--out", str(out), "-q"]
    )  # fmt: skip
    assert code == 0
    run = read_run(out)
    assert len(run.records) == 24
    proc = run_cli("report", str(out), "--bootstrap", "200", "--out-dir", str(tmp_path / "png"))
    assert proc.returncode == 0, proc.stderr
    turns: dict[str, list[int | None]] = defaultdict(list)
    for rec in run.records:
        turns[rec["task_id"]].append(rec["first_success_turn"])
    surface = pass_surface_from_first_success(turns, 6)
    rows = [ln.split() for ln in proc.stdout.splitlines() if re.match(r"^\s+\d+\s+\d\.\d{3}", ln)]
    assert len(rows) == 4  # K = 1..4
    for row in rows:
        k = int(row[0])
        values = [float(x) for x in row[1:] if re.fullmatch(r"\d\.\d{3}", x)]
        assert values == pytest.approx([round(surface.value(k, t), 3) for t in range(1, 7)])
    for name in ("noisy_heatmap.png", "noisy_k_curves.png", "noisy_t_curves.png"):
        width, height = _png_size(tmp_path / "png" / name)
        assert width > 200 and height > 200


def test_report_of_two_runs_prints_a_difference_table(tmp_path: Path) -> None:
    outs = []
    for policy in ("random", "expert"):
        out = tmp_path / f"{policy}.jsonl"
        args = ["eval", FROZEN, "--policy", policy, "--tasks", "4", "--samples", "3", "-q"]
        assert main([*args, "--out", str(out)]) == 0
        outs.append(str(out))
    proc = run_cli("report", *outs, "--bootstrap", "100", "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "Difference random (random) - expert (expert): 4 common tasks" in proc.stdout
    # the gap is A - B with A the first file: random minus expert is negative on the whole
    gap = proc.stdout.split("Difference", 1)[1].split("Plots:", 1)[0]
    cells = [float(x) for x in re.findall(r"(?<![\[,\d])-?\d\.\d{3}(?= |$)", gap, re.M)]
    assert cells and sum(cells) < 0
    width, _ = _png_size(tmp_path / "random_vs_expert_heatmap.png")
    assert width > 400


def test_compare_runs_through_the_analyses_module(tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    proc = run_cli(
        "compare", FROZEN, "--policy-a", "expert", "--policy-b", "random", "--tasks", "2",
        "--samples", "1", "--actions", "4", "--json-out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert (data["policy_a"], data["policy_b"], data["n_actions"]) == ("expert", "random", 4)
    # the states are those the expert visits: one episode per task, at least one state each
    assert data["n_states"] >= 2 and len(data["states"]) == data["n_states"]
    assert sum(data["counts"].values()) == data["n_states"]
    assert all(len(s["actions_a"]) == len(s["actions_b"]) == 4 for s in data["states"])
    # the oracle never scores a random move above the optimal one
    assert data["counts"]["loss"] == 0
    assert data["mean_score_a"]["estimate"] >= data["mean_score_b"]["estimate"]


def test_sandbox_subcommand_hands_its_arguments_to_the_image_module(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["sandbox", "status"])
    out = capsys.readouterr().out
    assert out.startswith("docker sandbox: ")
    assert (status == 0) == out.startswith("docker sandbox: ready")
