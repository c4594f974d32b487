"""Records and resume: torn tails repaired, other runs refused, kill -9 midway loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness_toy import ENV_ID

from multiturn_envs.harness import SCHEMA_VERSION, EvalConfig, run_eval
from multiturn_envs.harness.records import (
    RecordFileError,
    RecordWriter,
    RunMismatch,
    iter_lines,
    make_header,
    read_run,
    repair_truncated_tail,
)
from multiturn_envs.policies.baselines import RandomPolicy

HERE = Path(__file__).parent
TASKS = ["line-1", "line-3", "line-5", "line-6"]


def config(**kw: Any) -> EvalConfig:
    base: dict[str, Any] = {
        "env_id": ENV_ID,
        "policy": "random",
        "tasks": TASKS,
        "samples": 4,
        "max_turns": 6,
    }
    base.update(kw)
    return EvalConfig(**base)


def stable(path: Path) -> list[dict[str, Any]]:
    out = []
    for rec in read_run(path).records:
        rec = dict(rec)
        rec.pop("timings")
        out.append(rec)
    return sorted(out, key=lambda r: (r["task_id"], r["sample"], r["max_turns"]))


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_header_then_one_line_per_trajectory(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run_eval(config(), RandomPolicy(), str(out))
    lines = lines_of(out)
    assert lines[0]["kind"] == "header" and lines[0]["schema"] == SCHEMA_VERSION
    assert lines[0]["config"]["tasks"] == TASKS and lines[0]["config"]["samples"] == 4
    trajectories = lines[1:]
    assert len(trajectories) == 16 and all(r["kind"] == "trajectory" for r in trajectories)
    assert {r["run_id"] for r in trajectories} == {lines[0]["run_id"]}
    keys = {(r["task_id"], r["sample"]) for r in trajectories}
    assert len(keys) == 16


def test_truncated_last_line_is_repaired_and_rerun(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run_eval(config(), RandomPolicy(), str(out))
    reference = stable(out)
    text = out.read_bytes()
    lines = text.splitlines(keepends=True)
    torn = b"".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2]  # lose 2, tear 1
    out.write_bytes(torn)
    assert len(list(iter_lines(out))) == len(lines) - 3  # the reader tolerates the torn tail
    summary = run_eval(config(), RandomPolicy(), str(out))
    assert summary.repaired_bytes == len(lines[-3]) // 2
    assert summary.skipped == 13 and summary.written == 3
    assert stable(out) == reference
    assert len(out.read_bytes().splitlines()) == len(lines)  # nothing duplicated


def test_repair_of_a_file_without_any_newline(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"schema": 1, "ki')
    assert repair_truncated_tail(path) == 17
    assert path.read_bytes() == b""


def test_a_different_run_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run_eval(config(), RandomPolicy(), str(out))
    before = out.read_bytes()
    with pytest.raises(RunMismatch, match=r"different run \(max_turns: 6 in the file, 7 now\)"):
        run_eval(config(max_turns=7), RandomPolicy(), str(out))
    with pytest.raises(RunMismatch, match="seed"):
        run_eval(config(seed=1), RandomPolicy(), str(out))
    assert out.read_bytes() == before  # nothing touched


def test_no_resume_refuses_and_overwrite_replaces(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run_eval(config(), RandomPolicy(), str(out))
    with pytest.raises(RecordFileError, match="exists"):
        run_eval(config(), RandomPolicy(), str(out), resume=False)
    summary = run_eval(config(samples=2), RandomPolicy(), str(out), overwrite=True)
    assert summary.written == 8 and len(read_run(out).records) == 8


def test_a_corrupt_middle_line_is_named(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run_eval(config(), RandomPolicy(), str(out))
    lines = out.read_bytes().splitlines(keepends=True)
    lines[3] = b"not json\n"
    out.write_bytes(b"".join(lines))
    with pytest.raises(RecordFileError, match="line 4 is not valid JSON"):
        read_run(out)
    with pytest.raises(RecordFileError, match="line 4"):
        run_eval(config(), RandomPolicy(), str(out))


def test_not_a_record_file(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"kind": "something else"}\n')
    with pytest.raises(RecordFileError, match="no header"):
        read_run(path)


def test_writer_dedups_on_read_and_tracks_done(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    header = make_header({"a": 1})
    rec = {"kind": "trajectory", "task_id": "t", "sample": 0, "max_turns": 3}
    with RecordWriter(path, header) as writer:
        writer.write(rec)
        writer.write(rec)
        assert writer.done == {("t", 0, 3)}
    run = read_run(path)
    assert len(run.records) == 1 and run.duplicates == 1
    with RecordWriter(path, make_header({"a": 1})) as writer:
        assert writer.done == {("t", 0, 3)}


def _cli(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "multiturn_envs.cli", "eval", f"harness_toy:{ENV_ID}",
        "--policy", "harness_toy:SlowRandomPolicy", "--samples", "10", "--max-turns", "6",
        "--in-flight", "4", "--seed", "3", "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    killed, clean = tmp_path / "killed.jsonl", tmp_path / "clean.jsonl"
    proc = subprocess.Popen(_cli(killed), env=_env(), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:  # wait until some (not all) trajectories are on disk
            if killed.exists() and killed.read_bytes().count(b"\n") >= 8:
                break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    partial = read_run(killed).records
    assert 0 < len(partial) < 60
    # a kill can also tear a line mid-write; simulate the worst case on top of the real kill
    with open(killed, "ab") as fh:
        fh.write(b'{"schema":1,"kind":"trajectory","task_id":"line-')
    resumed = subprocess.run(_cli(killed), env=_env(), capture_output=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr.decode()
    done = subprocess.run(_cli(clean), env=_env(), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert stable(killed) == stable(clean)
    assert len(killed.read_bytes().splitlines()) == 1 + 60  # header + each trajectory once
