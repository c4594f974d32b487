"""The writer's background flushes: every record is on disk at close, failures are not lost."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from multiturn_envs.harness.records import RecordWriter, dumps_line, make_header, read_run


def trajectory(i: int) -> dict[str, object]:
    return {"kind": "trajectory", "task_id": f"t{i % 7}", "sample": i, "max_turns": 4, "x": i}


def test_flushing_on_every_write_keeps_every_record_and_no_thread(tmp_path: Path) -> None:
    before = threading.active_count()
    path = tmp_path / "r.jsonl"
    header = make_header({"what": "fsync"})
    with RecordWriter(path, header, fsync_interval_s=0.0) as writer:
        for i in range(300):
            writer.write(trajectory(i))
    assert threading.active_count() == before  # the flush thread was joined at close
    run = read_run(path)
    assert [r["sample"] for r in run.records] == list(range(300))
    assert path.read_bytes().startswith(dumps_line(header))


def test_a_failed_background_flush_is_raised_not_swallowed(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path / "r.jsonl", make_header({"what": "eio"}), fsync_interval_s=0.0)
    writer.open()
    writer.write(trajectory(0))
    assert writer._syncer is not None
    writer._syncer.join()
    writer._sync_error = OSError(5, "Input/output error")  # what a dying disk reports
    with pytest.raises(OSError, match="Input/output"):
        writer.write(trajectory(1))
    writer.close()
    assert writer._fd is None  # closed all the same
    assert os.path.getsize(tmp_path / "r.jsonl") > 0
