"""The state keeper (``multiturn_envs.sandbox.state_keeper``) against the engine it stands in
for, and against the agents it must not trust.

* what it reads is what the engine's archive reads (names, types, modes, owners, times, link
  targets, contents), for a state with every kind of entry the agent can make;
* what it fills is what it read (a snapshot through ``get_state``/``set_state`` comes back
  as the engine sees it);
* the agent can neither forge what it sees (times put back, writes through ``mmap`` after the
  command returned, a directory swapped for a link while it reads) nor reach it (signals,
  ``ptrace``, ``/proc``); a root agent that kills it gets the engine, and the same verdicts;
* huge and deep states: refused in-band, or read by the engine, never a hang.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator

import pytest

from multiturn_envs.envs.terminal.env import StateTooLarge, TerminalEnv
from multiturn_envs.envs.terminal.tasks import TerminalTask
from multiturn_envs.sandbox.checker import Check
from multiturn_envs.sandbox.state_keeper import KeeperFailed, StateKeeper
from multiturn_envs.sandbox.trees import State, read_state

pytestmark = pytest.mark.docker

TASK = TerminalTask(
    task_id="keeper",
    instruction="Write done.txt.",
    checks=(Check("done", "test -f done.txt"), Check("seen", "grep -q seen note.txt")),
    solution=("echo done > done.txt",),
    files={"note.txt": "not yet\n", "sub/kept.txt": "kept\n"},
)
ROOT_TASK = TerminalTask(
    task_id="keeper-root",
    instruction="Write done.txt.",
    checks=(Check("done", "test -f done.txt"),),
    solution=("echo done > done.txt",),
    agent_user="0:0",
    verifier_user="0:0",
)

EVERY_KIND = r"""
mkdir -p d/e/f && echo deep > d/e/f/g && ln d/e/f/g hard && ln -s ../outside d/rel &&
ln -s /etc/passwd abs && mkfifo fifo && printf 'a\0b' > binary && : > empty &&
echo old > old && touch -d @1 old && echo s > secret && chmod 000 secret &&
echo x > suid && chmod 4755 suid && mkdir closed && echo in > closed/in && chmod 000 closed &&
printf x > "$(printf 'bad\377name')" && printf u > 'uni ✓ name' && truncate -s 300K sparse &&
echo t > /tmp/t && ln -s /app /tmp/app-link && touch -h -d @7 abs && echo ok
"""


@pytest.fixture(scope="module")
def env(terminal_ready: None) -> Iterator[TerminalEnv]:
    env = TerminalEnv(tasks=[TASK, ROOT_TASK], max_turns=None, end_on_success=False)
    yield env
    env.close()


def members(state: State) -> dict[str, tuple[object, ...]]:
    """Each member of a state's tars: what any check could see of it (whole-second times:
    the engine's tars keep no fraction)."""
    out: dict[str, tuple[object, ...]] = {}
    for part in state.parts:
        part.file.seek(0)
        with tarfile.open(fileobj=part.file, mode="r|") as tar:
            for m in tar:
                data = tar.extractfile(m).read() if m.isreg() else b""  # type: ignore[union-attr]
                kind = m.type if m.type != tarfile.AREGTYPE else tarfile.REGTYPE
                out[m.name.rstrip("/")] = (
                    kind,
                    m.mode & 0o7777,
                    m.uid,
                    m.gid,
                    int(m.mtime),
                    m.linkname,
                    data,
                )
    return out


def keeper_of(env: TerminalEnv) -> StateKeeper | None:
    """The running episode's keeper (``None`` once given up)."""
    assert env._episode is not None
    return env._episode.keeper


def engine_state(env: TerminalEnv) -> State:
    assert env._episode is not None
    return read_state(env._episode.box, env._episode.prepared.layout.paths, 256 << 20)


def test_the_keeper_reads_what_the_engine_reads(env: TerminalEnv) -> None:
    env.reset(seed=0, options={"task_id": "keeper"})
    assert env._episode is not None and env._episode.keeper is not None
    obs, *_ = env.step(EVERY_KIND)
    assert obs.startswith("ok"), obs
    keeper = env._episode.keeper
    assert keeper is not None and keeper.alive
    by_keeper, by_engine = env._read_state(), engine_state(env)
    try:
        assert [p.path for p in by_keeper.parts] == [p.path for p in by_engine.parts]
        assert by_keeper.content_digest == by_engine.content_digest
        seen, expected = members(by_keeper), members(by_engine)
        assert seen == expected
        assert {"app/closed/in", "app/fifo", "app/hard", "app/sparse", "tmp/app-link"} <= set(seen)
        assert seen["app/hard"][0] == tarfile.LNKTYPE and seen["app/abs"][4] == 7
    finally:
        by_keeper.close()
        by_engine.close()


def test_a_snapshot_filled_by_the_keeper_is_what_the_engine_read(env: TerminalEnv) -> None:
    env.reset(seed=0, options={"task_id": "keeper"})
    env.step(EVERY_KIND)
    before = engine_state(env)
    snapshot = env.get_state()
    env.set_state(snapshot)  # a fresh box, filled by its keeper
    assert env._episode is not None and env._episode.keeper is not None
    after = engine_state(env)
    try:
        a, b = members(before), members(after)
        for top in ("app", "tmp"):  # the mount's own time is the unpacking's, as the engine's
            a.pop(top), b.pop(top)
        assert a == b
        assert before.content_digest == after.content_digest
    finally:
        before.close()
        after.close()
    obs, *_ = env.step("cat sub/kept.txt closed/in 2>&1; ls -l /tmp/app-link")
    assert obs.startswith("kept\ncat: closed/in: Permission denied"), obs


def test_changes_that_hide_from_times_and_from_the_command_are_seen(env: TerminalEnv) -> None:
    env.reset(seed=0, options={"task_id": "keeper"})
    _, _, _, _, info = env.step("true")
    assert info["checks_passed"] == 0
    # the same size and time as before: only the bytes tell
    _, _, _, _, info = env.step(
        "touch -r note.txt /tmp/r; echo 'seen  ' > note.txt; touch -r /tmp/r note.txt"
    )
    assert info["checks_passed"] == 1
    digest = env._digest
    # a write through mmap by a process that outlives the command: no time, no event
    env.step(
        "python3 -c \"import mmap, time; f = open('note.txt', 'r+b'); "
        "m = mmap.mmap(f.fileno(), 0); time.sleep(0.5); m[0:4] = b'SEEN'; m.flush(); "
        'time.sleep(60)" > /dev/null 2>&1 &'
    )
    _, _, _, _, info = env.step("sleep 1.5")
    assert env._digest != digest and info["checks_passed"] == 0  # grep -q seen: case matters


def test_a_directory_swapped_for_a_link_while_read_is_never_followed(env: TerminalEnv) -> None:
    env.reset(seed=0, options={"task_id": "keeper"})
    env.step(
        "(while :; do rm -rf /app/x; mkdir /app/x; echo in > /app/x/in; rm -rf /app/x; "
        "ln -s /etc /app/x; done) > /dev/null 2>&1 &"
    )
    try:
        for _ in range(25):
            state = env._read_state()
            try:
                names = set(members(state))
            finally:
                state.close()
            assert not {n for n in names if n.startswith("app/x/") and n != "app/x/in"}, names
        assert env._episode is not None and env._episode.keeper is not None
    finally:
        env.step("kill %1; wait")


def test_an_agent_can_neither_signal_trace_nor_read_the_keeper(env: TerminalEnv) -> None:
    env.reset(seed=0, options={"task_id": "keeper"})
    find = "pid=$(grep -l '[k]eeper_main' /proc/[0-9]*/cmdline | head -1 | cut -d/ -f3)"
    obs, *_ = env.step(
        f"{find}; echo pid=$pid; kill -9 $pid 2>&1; kill -STOP $pid 2>&1; "
        "cat /proc/$pid/environ /proc/$pid/mem 2>&1 | head -c 300; ls /proc/$pid/fd 2>&1; "
        "python3 -c \"import ctypes, sys; print('ptrace', "
        'ctypes.CDLL(None).ptrace(16, int(sys.argv[1]), 0, 0))" $pid; '
        "grep -E '^Cap(Eff|Prm)' /proc/self/status"
    )
    assert "pid=" in obs and "pid=\n" not in obs, obs
    assert obs.count("Operation not permitted") >= 2 and "ptrace -1" in obs, obs
    assert "PATH=" not in obs and "Permission denied" in obs, obs
    assert "CapEff:\t0000000000000000" in obs and "CapPrm:\t0000000000000000" in obs, obs
    keeper = env._episode.keeper if env._episode is not None else None
    assert keeper is not None
    reads = keeper.reads
    _, _, _, _, info = env.step("echo done > done.txt")
    assert info["checks_passed"] == 1 and keeper.alive and keeper.reads == reads + 1


def test_a_root_agent_that_kills_the_keeper_gets_the_engine_and_the_same_verdicts(
    env: TerminalEnv,
) -> None:
    env.reset(seed=0, options={"task_id": "keeper-root"})
    assert env._episode is not None and env._episode.keeper is not None
    assert len(env._episode.prepared.layout.paths) > 2  # every top-level directory
    obs, *_ = env.step(
        "for p in $(grep -l '[k]eeper_main' /proc/[0-9]*/cmdline | cut -d/ -f3); do "
        "cat /proc/$p/mem 2>&1 | head -c 80; kill -9 $p && echo killed; done"
    )
    assert "killed" in obs and "Permission denied" in obs, obs
    _, _, _, _, info = env.step("echo done > done.txt")
    assert keeper_of(env) is None  # given up: the engine reads from now on
    assert info["success"] and "checker_error" not in info, info


def test_huge_and_deep_states_are_refused_or_read_by_the_engine(env: TerminalEnv) -> None:
    env.reset(seed=0, options={"task_id": "keeper"})
    obs, *_ = env.step("for i in 1 2 3 4 5; do truncate -s 200M big$i; done; echo made")
    assert "the tests were not run" in obs and "256 MiB" in obs, obs
    keeper = env._episode.keeper if env._episode is not None else None
    assert keeper is not None and keeper.alive  # refused in-band: it goes on
    _, _, _, _, info = env.step("rm big*; echo done > done.txt")
    assert info["checks_passed"] == 1 and keeper.alive
    # a path longer than any program can name (made relative to a deep cwd): no container
    # could unpack it, no snapshot restore it; refused in-band as a huge state is
    long = "n" * 255
    obs, *_ = env.step(
        f"python3 -c \"import os\nfor _ in range(20): os.makedirs('{long}'); os.chdir('{long}')"
        "\nopen('f', 'w').write('x')\"; echo made"
    )
    assert "the tests were not run" in obs and "longer than any program can name" in obs, obs
    with pytest.raises(StateTooLarge, match=r"a path of 4,100 bytes, longer than"):
        env.get_state()
    assert keeper.alive
    _, _, _, _, info = env.step(f"rm -rf {long}")
    assert info["checks_passed"] == 1 and keeper.alive
    # deeper than the keeper walks: the engine reads it, for the rest of the episode
    _, _, _, _, info = env.step("mkdir -p $(printf 'd/%.0s' $(seq 300)) && echo seen > note.txt")
    assert keeper_of(env) is None
    assert info["success"] and "checker_error" not in info, info


def test_the_keeper_answers_a_bad_request_without_losing_its_place(env: TerminalEnv) -> None:
    """Host-side refusals: directories that are not the box's writable ones."""
    env.reset(seed=0, options={"task_id": "keeper"})
    keeper = env._episode.keeper if env._episode is not None else None
    assert keeper is not None
    with pytest.raises(KeeperFailed, match="not writable"):
        keeper.read(["/etc"], 1 << 20)
    with pytest.raises(KeeperFailed, match="not a writable"):
        keeper.put("/etc", io.BytesIO().getvalue())
    assert keeper.alive
    state = keeper.read(["/app"], 1 << 20)
    try:
        assert "app/note.txt" in members(state)
    finally:
        state.close()


def test_the_shell_state_read_by_the_keeper_is_the_engines_whatever_the_file_is(
    env: TerminalEnv,
) -> None:
    env.reset(seed=0, options={"task_id": "keeper"})
    env.step("cd sub; x=41; f() { echo $((x + 1)); }")
    assert env._episode is not None
    shell, box = env._episode.shell, env._episode.box
    seen = env._shell_state()
    assert seen == shell.saved_state() and 'x="41"' in seen and "/app/sub" in seen
    assert env.get_state()["env"]["shell"] == seen
    # what the agent could leave there: a FIFO, a link out, more than the cap
    for make in (
        "rm -f {f}; mkfifo {f}",
        "rm -f {f}; ln -s /etc/passwd {f}",
        "rm -f {f}; head -c 5000000 /dev/zero > {f}",
    ):
        script = make.format(f=shell.state_file)
        done = box.exec(["sh", "-c", script], user="0:0", timeout_s=30)
        assert done.exit_code == 0, done
        assert env._shell_state() == shell.saved_state() == ""
        assert keeper_of(env) is not None
