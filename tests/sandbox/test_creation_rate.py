"""The per-engine creation-rate limit shared by every process of a machine (no engine needed).

What it promises: creations on one engine are spaced at least ``1 / rate`` apart whichever
process or thread asks, first come first served; a corrupt or absurd clock file (garbage,
NaN, a time far ahead) costs no long sleep; and one engine has one budget, however its
address's options name or size it.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import stat
import struct
import threading
from pathlib import Path

import pytest

from multiturn_envs.sandbox.creation_rate import CreationRate
from multiturn_envs.sandbox.docker_engine import DockerEngine
from multiturn_envs.sandbox.engines import EngineAddress

RATE = 50.0


def _reserve_many(folder: str, n: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    rate = CreationRate("tcp://engine:2376", RATE, folder)
    out.put([rate._reserve() for _ in range(n)])


def test_slots_are_spaced_across_processes_and_threads(tmp_path: Path) -> None:
    """Three processes and four threads of this one take slots from one clock: sorted, every
    two are at least ``1 / rate`` apart (each reservation moves the clock by that much)."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_reserve_many, args=(str(tmp_path), 20, out)) for _ in range(3)]
    for proc in procs:
        proc.start()
    here = CreationRate("tcp://engine:2376", RATE, str(tmp_path))
    mine: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(10):
            slot = here._reserve()
            with lock:
                mine.append(slot)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    slots = list(mine)
    for _ in procs:
        slots.extend(out.get(timeout=60))
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    slots.sort()
    assert len(slots) == 100
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) >= 1 / RATE - 1e-6, min(gaps)


def test_waiting_sleeps_until_the_slot(tmp_path: Path) -> None:
    rate = CreationRate("local", 10.0, str(tmp_path))
    assert rate.wait() == 0.0  # a fresh clock: now
    waited = rate.wait()  # the next slot is 0.1 s on
    assert 0.0 < waited <= 0.1 + 1e-3


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"xyz",
        struct.pack("<d", float("nan")),
        struct.pack("<d", float("inf")),
        struct.pack("<d", 1e300),
        struct.pack("<d", -1.0),
        b"\xff" * 4096,
    ],
    ids=["empty", "short", "nan", "inf", "far-ahead", "negative", "garbage"],
)
def test_a_corrupt_clock_costs_no_long_sleep(tmp_path: Path, content: bytes) -> None:
    rate = CreationRate("local", 5.0, str(tmp_path))
    rate.path.write_bytes(content)
    assert rate.wait() < 0.5  # started afresh: at most one interval of the new clock


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_rate_that_is_not_positive_is_refused(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        CreationRate("local", bad, str(tmp_path))


def test_one_engine_has_one_budget_whatever_its_options() -> None:
    """``name=``, ``capacity=`` and ``rate=`` describe how this run uses an engine, not which
    engine it is: two processes naming it differently still share its clock."""
    first = DockerEngine(EngineAddress.parse("tcp://10.0.0.2:2376?name=a&capacity=4"))
    second = DockerEngine(EngineAddress.parse("tcp://10.0.0.2:2376?name=b&rate=3"))
    other = DockerEngine(EngineAddress.parse("tcp://10.0.0.3:2376?name=a"))
    assert first.rate.path == second.rate.path != other.rate.path
    assert second.rate.rate == 3.0
    ssh = DockerEngine(EngineAddress.parse("ssh://u@h"))
    ssh_other_socket = DockerEngine(EngineAddress.parse("ssh://u@h?socket=/run/user/1/docker.sock"))
    assert ssh.rate.path != ssh_other_socket.rate.path


def test_the_default_folder_is_this_users_own() -> None:
    rate = CreationRate("local", 1.0)
    folder = rate.path.parent
    assert folder.name == f"mte-engine-rate-{os.getuid()}"
    st = folder.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def test_a_folder_others_could_write_or_a_link_is_refused(tmp_path: Path) -> None:
    """In a shared ``/tmp`` another user can make the folder first: writable by all, or a link
    to one of theirs. Neither is used (a clock's write could land in a file they chose)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match="not a private folder"):
        CreationRate("local", 1.0, str(shared))
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(RuntimeError, match="not a private folder"):
        CreationRate("local", 1.0, str(tmp_path / "link"))
    (tmp_path / "plain-file").write_text("x")
    with pytest.raises(RuntimeError, match=r"creation-rate folder .*plain-file"):
        CreationRate("local", 1.0, str(tmp_path / "plain-file"))
    if os.getuid() == 0:  # another user's folder, mode 0700 and all
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(RuntimeError, match="another user's"):
            CreationRate("local", 1.0, str(theirs))


def test_a_clock_is_never_opened_through_a_link(tmp_path: Path) -> None:
    folder = tmp_path / "clocks"
    folder.mkdir(mode=0o700)
    rate = CreationRate("tcp://engine:2376", 5.0, str(folder))
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious bytes")
    rate.path.symlink_to(victim)
    with pytest.raises(RuntimeError, match="cannot be opened"):
        rate.wait()
    assert victim.read_bytes() == b"precious bytes"
    rate.path.unlink()
    os.mkfifo(rate.path)  # not a regular file: a clear error, never a block
    with pytest.raises(RuntimeError, match="creation-rate clock"):
        rate.wait()
