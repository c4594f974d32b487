"""Record files are the user's data (issue 29): ``eval --out`` writes only to a file it created
or to one whose header says it is this run; every other kind of file is refused before a byte
is written and stays byte-identical, ``--overwrite`` included; a torn tail is cut only from
our own file, after its header matched (``harness/records.py``, ``RecordWriter.open``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multiturn_envs.cli import main
from multiturn_envs.errors import RecordFileError, RunMismatch
from multiturn_envs.harness.records import RecordWriter, make_header, read_run

FROZEN = "MT/FrozenLake-v0"
BAD_OUTPUT = ("Traceback", "MemoryError", "RecursionError")


def eval_into(path: Path, *extra: str) -> list[str]:
    return ["eval", FROZEN, "--tasks", "2", "--samples", "1", "--out", str(path), "-q", *extra]


@pytest.fixture(scope="module")
def our_run(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real record file of the run ``eval_into`` makes (to tear, and to find again)."""
    path = tmp_path_factory.mktemp("ours") / "r.jsonl"
    assert main(eval_into(path)) == 0
    return path.read_bytes()


def foreign(kind: str, our_run: bytes) -> bytes:
    header = json.loads(our_run.splitlines()[0])
    other = {**header, "config": {**header["config"], "max_turns": 99}}
    another_run = json.dumps(other).encode() + b"\n" + our_run.split(b"\n", 1)[1]
    return {
        "a JSON document without final newline": json.dumps({"precious": [1, 2, 3]}).encode(),
        "a pretty-printed JSON document": json.dumps({"precious": 1}, indent=2).encode() + b"\n",
        "100 KB of text": b"notes of the week, line by line\n" * 3200,
        "100 KB of text without newline": b"x" * 100_000,
        "a garbage line after our header": our_run.split(b"\n", 1)[0] + b"\nnot json\n",
        "another run's file": another_run,
        "another run's file with a torn tail": another_run + b'{"kind": "traj',
        "a text file with a torn tail": b"a line\nanother line\nhalf a li",
        "our header, torn": our_run[:40],
        "an empty file": b"",
        "binary garbage": bytes(range(256)) * 40,
    }[kind]


FOREIGN = [
    "a JSON document without final newline",
    "a pretty-printed JSON document",
    "100 KB of text",
    "100 KB of text without newline",
    "a garbage line after our header",
    "another run's file",
    "another run's file with a torn tail",
    "a text file with a torn tail",
    "our header, torn",
    "an empty file",
    "binary garbage",
]


def refused_untouched(
    capsys: pytest.CaptureFixture[str], path: Path, before: bytes, *extra: str
) -> str:
    code = main(eval_into(path, *extra))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and not any(w in err for w in BAD_OUTPUT), err
    assert path.read_bytes() == before
    return err


@pytest.mark.parametrize("kind", FOREIGN)
def test_bound_a_foreign_file_is_refused_and_byte_identical(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, our_run: bytes, kind: str
) -> None:
    """The issue: a JSON document without final newline or 100 KB of text were replaced by a
    new run (exit 0); a garbage line, another run's file, a torn text file lost 32-40 bytes."""
    path = tmp_path / "precious.json"
    before = foreign(kind, our_run)
    path.write_bytes(before)
    refused_untouched(capsys, path, before)
    refused_untouched(capsys, path, before, "--no-resume")


@pytest.mark.parametrize(
    "kind", [k for k in FOREIGN if "another run" not in k and "after our header" not in k]
)
def test_bound_overwrite_replaces_only_record_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, our_run: bytes, kind: str
) -> None:
    path = tmp_path / "precious.json"
    before = foreign(kind, our_run)
    path.write_bytes(before)
    refused_untouched(capsys, path, before, "--overwrite")


def test_overwrite_replaces_another_runs_record_file(tmp_path: Path, our_run: bytes) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(foreign("another run's file", our_run))
    assert main(eval_into(path, "--overwrite")) == 0
    assert read_run(path).config["max_turns"] != 99


def test_bound_a_directory_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "keep").write_text("x")
    assert main(eval_into(folder)) == 2
    assert "directory" in capsys.readouterr().err
    assert [p.name for p in folder.iterdir()] == ["keep"]


def test_bound_a_fifo_is_refused_without_blocking(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    assert main(eval_into(path)) == 2
    assert "FIFO" in capsys.readouterr().err
    assert main(["report", str(path)]) == 2  # readers too: no hang on a FIFO
    assert "FIFO" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["a foreign file", "our own run", "nothing"])
def test_bound_a_symlink_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, our_run: bytes, target: str
) -> None:
    """A link at --out is not followed (its target may be anyone's file, or not exist yet)."""
    aim = tmp_path / "target"
    before = {"a foreign file": b"precious\n", "our own run": our_run, "nothing": None}[target]
    if before is not None:
        aim.write_bytes(before)
    link = tmp_path / "r.jsonl"
    link.symlink_to(aim)
    assert main(eval_into(link)) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert link.is_symlink()
    assert (aim.read_bytes() if before is not None else aim.exists()) == (before or False)


def test_bound_a_torn_tail_is_cut_only_after_our_header_matched(
    tmp_path: Path, our_run: bytes
) -> None:
    path = tmp_path / "r.jsonl"
    lines = our_run.splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1][:30])  # our run, killed mid-line
    assert main(eval_into(path)) == 0
    assert len(read_run(path).records) == 2
    assert all(line.endswith(b"\n") for line in path.read_bytes().splitlines(keepends=True))


def test_a_fresh_file_has_its_header_on_disk_at_once(tmp_path: Path) -> None:
    """So a machine crash never leaves an empty or torn first line, which resume refuses."""
    path = tmp_path / "r.jsonl"
    header = make_header({"what": "fresh"})
    writer = RecordWriter(path, header).open()
    try:
        assert json.loads(path.read_bytes()) == json.loads(json.dumps(header))
    finally:
        writer.close()


def test_resume_checks_each_line_it_takes_up(tmp_path: Path, our_run: bytes) -> None:
    header, first, *rest = our_run.splitlines(keepends=True)
    record = json.loads(first)
    record["sample"] = "zero"
    path = tmp_path / "r.jsonl"
    before = header + json.dumps(record).encode() + b"\n" + b"".join(rest)
    path.write_bytes(before)
    with pytest.raises(RecordFileError, match="line 2: 'sample' is str"):
        RecordWriter(path, json.loads(header)).open()
    assert path.read_bytes() == before


HEADER: dict[str, Any] = make_header({"what": "generated"})  # type: ignore[assignment]


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=st.binary(max_size=4000) | st.text(max_size=4000).map(str.encode))
def test_bound_any_generated_foreign_content_stays_byte_identical(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    for options in ({}, {"resume": False}, {"overwrite": True}):
        with pytest.raises(RecordFileError):
            RecordWriter(path, HEADER, **options).open()  # type: ignore[arg-type]
        assert path.read_bytes() == content


def test_another_run_is_a_run_mismatch(tmp_path: Path, our_run: bytes) -> None:
    path = tmp_path / "r.jsonl"
    before = foreign("another run's file with a torn tail", our_run)
    path.write_bytes(before)
    with pytest.raises(RunMismatch, match="different run"):
        RecordWriter(path, json.loads(our_run.splitlines()[0])).open()
    assert path.read_bytes() == before
