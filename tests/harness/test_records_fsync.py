"""The writer's background flushes: every record is on disk at close, failures are not lost."""

from __future__ import annotations

import os
import threading
import time
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
    # A FIFO is a real file whose fsync fails (EINVAL), as a dying disk's does (EIO). The
    # writer refuses to open a FIFO (records go to regular files), so the disk "dies" after
    # the open: the writer's descriptor is replaced by one of a FIFO, and the background flush
    # fails for real; the next write must say so.
    path = tmp_path / "r.jsonl"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets a writer open the FIFO
    try:
        writer = RecordWriter(path, make_header({"what": "eio"}), fsync_interval_s=0.0)
        writer.open()
        dying = os.open(fifo, os.O_WRONLY)
        assert writer._fd is not None
        os.dup2(dying, writer._fd)
        os.close(dying)
        writer.write(trajectory(0))  # starts a background flush, which fails
        deadline = time.monotonic() + 10
        with pytest.raises(OSError, match="Invalid argument"):
            while time.monotonic() < deadline:  # the failure surfaces at a following write
                writer.write(trajectory(1))
                time.sleep(0.01)
        with pytest.raises(OSError, match="Invalid argument"):
            writer.close()  # the flush at close fails too, and says so
        written = os.read(reader, 1 << 16)
        assert path.read_bytes() == dumps_line(writer.header)  # flushed before the failure
        assert b'"sample":0' in written  # what was written got through
        writer.close()  # the descriptor was released by the failed close: nothing left to do
    finally:
        os.close(reader)
