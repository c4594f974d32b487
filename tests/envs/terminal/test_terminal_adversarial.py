"""Hostile agents against MT/Terminal-v0: each attack is contained, reported, and the env works on.

Classes (each tested on the real engine):

* the sandbox: fork bomb, disk fills, memory hog, output floods, escapes (writing outside the
  writable directories, privilege, the network, the engine's socket, the host's environment),
  killing the shell and every process of the agent;
* reward without a solution: a check never runs what the agent can shadow (a sourced file, a
  module named like the standard library's, git's hooks and monitor);
* the checks and their runner: unreadable and unsignalable from what the agent planted (its
  argv, environment, memory and file descriptors; killing it);
* nothing of one job reaches the next, on the checker's side too (files, processes);
* every writable path capped; sparse and huge files refused in bounded time and memory;
* a flood of output never hangs a step or the close;
* a shell state file the agent wrote never kills the restored shell nor makes a step raise.
"""

from __future__ import annotations

import time

import docker
import pytest

from multiturn_envs.envs.terminal.env import StateTooLarge, TerminalEnv
from multiturn_envs.envs.terminal.tasks import TerminalTask
from multiturn_envs.sandbox.checker import Check

pytestmark = pytest.mark.docker

# (command, text expected in the observation (or ""), one that must NOT appear)
CORPUS: list[tuple[str, str, str]] = [
    # contained either way: fork fails at the pids limit, or the command times out first
    (":(){ :|:& };: ; sleep 1; echo survived", "", ""),
    (
        "dd if=/dev/zero of=/app/fill bs=1M count=400 2>&1 | tail -1; df -m /app | tail -1; "
        "rm -f /app/fill",
        "/app",
        "400 MiB",
    ),
    ("head -c 200M /dev/zero > /tmp/fill; echo rc=$?; rm -f /tmp/fill", "rc=", "rc=0"),
    ("python3 -c 'x = bytearray(2 << 30); print(\"allocated\")'", "", "allocated"),
    ("yes flood | head -c 50000000", "output truncated", ""),
    ("cat /dev/urandom | head -c 3000000 | base64 -w0", "output truncated", ""),
    ("touch /etc/owned /usr/bin/owned /job/x 2>&1; echo $?", "Read-only file system", ""),
    ("id -u; su -c id 2>&1; sudo id 2>&1; echo end", "65534", "uid=0"),
    (
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 3)' 2>&1 | tail -1",
        "Network is unreachable",
        "",
    ),
    ("ls -la /var/run/docker.sock /run/docker.sock 2>&1 | head -2", "No such file", ""),
    ("cat /proc/1/environ 2>&1 | head -c 100; env | grep -ci docker", "", "DOCKER_HOST"),
    ("mount -t tmpfs none /mnt 2>&1; echo rc=$?", "rc=", "rc=0"),
    (
        "grep -rl 'count is right' /app /tmp /job /etc /home /root /var 2>/dev/null; echo searched",
        "searched",
        "/",
    ),
    ("kill -9 1 2>&1; kill -9 $$", "", ""),
    ("kill -9 -1", "", ""),
]


COUNT_AGENT = (
    "n=0; for d in /proc/[0-9]*; do "
    "u=$(awk '/^Uid:/ {print $3}' $d/status 2>/dev/null); s=$(awk '/^State:/ {print $2}' "
    '$d/status 2>/dev/null); [ "$u" = 65534 ] && [ "$s" != Z ] && n=$((n+1)); done; echo $n'
)
"""How many live processes of the agent's uid the box holds, counted by root from outside the
agent's processes (awk over /proc, not the killer's own builtins)."""


def agent_processes(env: TerminalEnv) -> str:
    """:data:`COUNT_AGENT` in the episode's current box."""
    assert env._episode is not None
    done = env._episode.box.exec(["sh", "-c", COUNT_AGENT], user="0:0", timeout_s=60)
    return done.output.decode().split()[-1]


def _alive(ids: list[str]) -> set[str]:
    return {c.id for c in docker.from_env().containers.list(all=True)} & set(ids)


def test_the_corpus_is_contained_and_the_env_keeps_working(terminal_ready: None) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=5, app_mb=64)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        env.step("cd /app && marker=kept")
        idle = agent_processes(env)  # the shell alone
        for command, expected, forbidden in CORPUS:
            obs, _, terminated, _, info = env.step(command)
            assert not terminated, command
            assert expected in obs, (command, obs[-600:])
            if forbidden:
                body = obs.rsplit("[exit status", 1)[0]
                assert forbidden not in body.replace(command, ""), (command, obs[-600:])
            assert len(obs) < env.output_cap + 600, command
            # a command may leave processes behind (background jobs persist): a fork bomb's
            # starve the next command, which then times out, and every process of the agent
            # is killed (counted down to 0, the shell alone after its restart); from then on
            # the env works at once, with no survivor forking
            obs, *_, info = env.step("echo ok $marker")
            if info["timed_out"]:
                assert agent_processes(env) == idle, (command, obs[-600:])
                obs, *_, info = env.step("echo ok $marker")
            assert obs.startswith("ok kept") and not info["timed_out"], (command, obs[-600:])
            assert "Resource temporarily unavailable" not in obs, (command, obs[-600:])
        # the hidden checks never entered the agent's container; its own tampering is moot
        env.step("printf '#!/bin/sh\\nexit 0\\n' > /app/run-tests.sh; rm -f /app/fill")
        _, reward, terminated, _, info = env.step("submit")
        assert terminated and reward == 0.0 and not info["success"]
        ids = env.container_ids()
    finally:
        env.close()
    assert not _alive(ids)


def test_every_writable_path_is_capped_and_no_volume_reaches_the_host_disk(
    terminal_ready: None,
) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=20, app_mb=32)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        for place in ("/app", "/tmp", "/mte-shell", "/dev/shm"):
            obs, *_ = env.step(
                f"for i in 1 2 3 4; do head -c 30M /dev/zero > {place}/f$i || break; done 2>&1;"
                f" du -sm {place} | cut -f1; rm -f {place}/f*"
            )
            used = int(obs.strip().splitlines()[-2])
            assert used <= 64, (place, obs[-400:])  # stopped at its cap (32 MiB; shm 64 MiB)
        box = env._episode.box  # type: ignore[union-attr]
        container = docker.from_env().containers.get(box.id)
        for mount in container.attrs["Mounts"]:
            assert mount["Type"] == "volume", mount
            volume = docker.from_env().volumes.get(mount["Name"])
            assert (volume.attrs.get("Options") or {}).get("type") == "tmpfs", (mount, volume.attrs)
        obs, *_ = env.step("echo ok")
        assert obs.startswith("ok\n")
    finally:
        env.close()


def test_sparse_and_huge_files_are_refused_in_bounded_time(terminal_ready: None) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=20, app_mb=64)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        obs, *_ = env.step("truncate -s 16G /app/huge 2>&1; echo rc=$?")
        assert "File size limit exceeded" in obs and "rc=153" in obs  # RLIMIT_FSIZE
        start = time.monotonic()
        obs, _, _, _, info = env.step(
            "for i in $(seq 1 40); do truncate -s 60M sparse$i; done; echo ok"
        )
        elapsed = time.monotonic() - start
        assert "ok" in obs and "the tests were not run" in obs and "sparse" in obs, obs[-500:]
        assert info["step_score"] == 0.0 and not info["success"]
        assert elapsed < 60, elapsed  # 2.4 GiB of zeros once archived: refused at the header
        with pytest.raises(StateTooLarge, match="sparse file counts at its full size"):
            env.get_state()
        obs, _, _, _, info = env.step("rm -f sparse*; grep -c ERROR service.log > error_count.txt")
        assert "not run" not in obs and info["success"]
        assert env.get_state()["env"]["trees"]["/app"]
    finally:
        env.close()


def test_a_flood_of_output_never_hangs_a_step_or_the_close(terminal_ready: None) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=3)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        start = time.monotonic()
        obs, _, _, _, info = env.step("yes flood")
        assert info["timed_out"] and "output truncated" in obs
        # stderr is the same stream as stdout (2>&1): a flood there costs what one here does
        obs, _, _, _, info = env.step("yes flood >&2")
        assert info["timed_out"] and "output truncated" in obs
        # a background flood: the next command's marker gets through the flood, or the command
        # times out and the restart kills the flood; either way the step returns
        env.step("yes flood &")
        obs, *_, info = env.step("echo marker-after")
        assert info["exit_code"] == 0 or (info["timed_out"] and info["shell_restarted"]), obs[-300:]
        env.step("kill %1")
        obs, *_ = env.step("echo quiet")
        assert obs.startswith("quiet\n") or "quiet\n" in obs
        assert time.monotonic() - start < 120
        ids = env.container_ids()
    finally:
        start = time.monotonic()
        env.close()
        assert time.monotonic() - start < 60  # the exec streams really closed
    assert not _alive(ids)


def test_a_shell_state_the_agent_wrote_never_kills_the_shell_or_raises(
    terminal_ready: None,
) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=2)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        for poison in ("exit 3", "sleep 1000", "__mte_done() { :; }"):  # dies, hangs, breaks
            env.step("cd /tmp && kept=1")
            # the state file is the agent's to write; then a timeout restarts the shell
            obs, *_ = env.step(
                f"rm -f /mte-shell/state; printf '%s\\n' {poison!r} > /mte-shell/state; sleep 100"
            )
            assert "restarted" in obs, (poison, obs)
            obs, *_ = env.step("echo alive $kept; pwd")
            assert obs.startswith("alive"), (poison, obs)
        env.step("mkfifo /mte-shell/fifo; rm -f /mte-shell/state; ln -s fifo /mte-shell/state")
        obs, *_ = env.step("sleep 100")
        obs, *_ = env.step("echo alive")
        assert obs.startswith("alive")
        # the last resort (a container that runs no shell) reads the same file: still no raise
        env.step("printf 'exit 1\\n' > /mte-shell/state.x; mv /mte-shell/state.x /mte-shell/x")
        result = env._move_to_fresh_container(RuntimeError("simulated"))
        assert "moved to a fresh container" in result.output
        obs, *_ = env.step("echo alive; ls /app")
        assert obs.startswith("alive\n") and "service.log" in obs
    finally:
        env.close()


# ---------------------------------------------------------------------- the checker
SECRET = "s3cr3t-expected-42"
PROBE = r"""#!/bin/bash
# what planted code run by a check tries
for pid in $PPID $(ls /proc | grep -E '^[0-9]+$'); do
  cat /proc/$pid/cmdline 2>/dev/null | tr '\0' ' '
  cat /proc/$pid/environ 2>/dev/null | tr '\0' ' '
  for fd in /proc/$pid/fd/*; do timeout 0.2 head -c 4096 "$fd" 2>/dev/null; done
done
grep -rs "s3cr""3t" /app /tmp /tests /logs /mte-home /mte-runner /root /etc 2>/dev/null | head -3
kill -9 $PPID 2>/dev/null
pkill -9 -f check_runner 2>/dev/null
kill -9 -1 2>/dev/null
echo 41
"""


def _probe_task(user: str) -> TerminalTask:
    return TerminalTask(
        task_id=f"probe-{user.partition(':')[0]}",
        instruction="Make ./answer.sh print the answer.",
        checks=(
            Check("answer", f'test "$(./answer.sh)" = "{SECRET}"'),
            Check("plain", "true"),
        ),
        solution=(f"printf '#!/bin/bash\\necho {SECRET}\\n' > answer.sh && chmod +x answer.sh",),
        files={"answer.sh": PROBE},
        setup="chmod +x answer.sh",
        verifier_user=user,
    )


@pytest.mark.parametrize("user", ["65534:65534", "0:0"])
def test_planted_code_can_neither_read_nor_signal_the_checks_and_their_runner(
    terminal_ready: None, user: str
) -> None:
    task = _probe_task(user)
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False)
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        report = env.check_report()
        (checker,) = env._checkers.values()
        runner_container = checker.container_ids()
        assert report.error is None and report.passed == (False, True), report
        leaked = "\n".join(report.outputs)
        if user != "0:0":  # root checks can read their own tests: a task's tests/ folder
            assert SECRET not in leaked and "s3cr3t" not in leaked, leaked[-2000:]
        # the runner lived through every kill: the same container, no error, the next job runs
        env.step("touch x")
        assert env.check_report().error is None
        assert checker.container_ids() == runner_container
        _, _, _, _, info = env.step(task.solution[0])
        assert info["success"] and "checker_error" not in info
    finally:
        env.close()


LEAK_CHECK = """\
if [ -e phase2 ]; then
  found=$(find /tmp /mte-home /logs/verifier /tests -mindepth 1 2>/dev/null;
          ps -eo args | grep -c -e '^[s]leep 600' -e '[n]ot dumpable')
  echo "found: $found"
  test "$found" = 0
else
  echo planted > /tmp/planted; echo planted > "$HOME/planted"
  echo planted > /logs/verifier/reward.txt 2>/dev/null
  (setsid nohup sleep 600 >/dev/null 2>&1 &)
  # and one not dumpable (the files of its /proc entry are root's)
  (setsid nohup python3 -c 'import ctypes, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
time.sleep(600)  # not dumpable' >/dev/null 2>&1 &)
  false
fi
"""


def test_nothing_of_one_job_reaches_the_next_on_the_checkers_side(terminal_ready: None) -> None:
    task = TerminalTask(
        task_id="leftovers",
        instruction="Create phase2.",
        checks=(Check("no leftovers", LEAK_CHECK),),
        solution=("touch phase2",),
    )
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False)
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        assert not env.check_report().all_passed  # the first job planted files and a process
        _, _, _, _, info = env.step("touch phase2")
        report = env.check_report()
        assert info["success"], report.outputs
    finally:
        env.close()


def test_no_check_runs_what_the_agent_can_shadow(terminal_ready: None) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False)
    try:
        # a check that sourced the agent's file could be redefined into passing
        env.reset(seed=0, options={"task_id": "env-config-file"})
        _, _, _, _, info = env.step(
            "printf 'test() { return 0; }\\ngrep() { return 0; }\\nAPP_MODE=production\\n'"
            " > app.env"
        )
        assert not info["success"]
        # a module named like the standard library's, next to the file a check reads
        env.reset(seed=0, options={"task_id": "json-update-config"})
        _, _, _, _, info = env.step("printf 'import os\\nos._exit(0)\\n' > json.py")
        assert info["step_score"] == 0.5 and not info["success"]  # "valid json", "rest kept"
        # git's hooks and file-system monitor in the agent's repository
        env.reset(seed=0, options={"task_id": "git-commit-file"})
        _, _, _, _, info = env.step(
            "cd repo && git add notes.md && git commit -qm 'Add notes' && echo dirty >> app.txt"
            " && printf '#!/bin/sh\\nexit 0\\n' > /app/fsmon && chmod +x /app/fsmon"
            " && git config core.fsmonitor /app/fsmon && git config core.untrackedCache true"
        )
        assert not info["success"], env.check_report()
    finally:
        env.close()


def test_after_a_fork_bomb_no_process_of_the_agent_is_left(terminal_ready: None) -> None:
    """The guarantee itself, three times: after a fork bomb that outlives its command's limit,
    the box the next command runs in holds the agent's shell and nothing else of the agent.
    Either the kill loop counted the agent's processes down to 0 and the shell restarted in
    the same box, or, when the bomb held every pid so that no exec could start there (the
    engine refuses it), the episode moved to a fresh box with its state: both end the same."""
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=3)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        env.step("cd /app && marker=kept")

        idle = agent_processes(env)  # the shell alone
        for _ in range(3):
            obs, *_, info = env.step(":(){ :|:& };: ; sleep 30")
            assert info["timed_out"], obs[-300:]
            assert agent_processes(env) == idle
            obs, *_ = env.step("echo ok $marker")
            assert obs.startswith("ok kept"), obs[-300:]
    finally:
        env.close()


def test_the_kill_loop_counts_survivors_and_keeps_going_until_its_bound(
    terminal_ready: None,
) -> None:
    """The count the loop trusts is right: with ``kill`` made to kill nothing, a live process of
    the agent is seen and the loop reports it at its bound instead of declaring victory."""
    from multiturn_envs.sandbox.shell_session import KILL_SCRIPT

    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=5)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        assert env._episode is not None
        box, user = env._episode.box, env._episode.shell.user
        sleeper = box.process(["sleep", "60"], user=user, workdir="/")
        toothless = "kill(){ return 1; }\n" + KILL_SCRIPT
        done = box.exec(["bash", "-c", toothless, "kill", "1"], user=user, timeout_s=30)
        assert done.exit_code == 1 and b"survive" in done.output, done
        sleeper.close()
    finally:
        env.close()
