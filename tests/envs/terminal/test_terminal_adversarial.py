"""Hostile commands against MT/Terminal-v0: each is contained, reported, and the env works on.

Fork bomb, disk fill (``/app`` and ``/tmp``), memory hog, output floods, escape attempts
(writing outside the work directory, privilege escalation, the network, the engine's socket,
the host's environment), killing the shell and every process of the agent, and reading or
rewriting the hidden checks. After the corpus, no container of the env is left.
"""

from __future__ import annotations

import pytest

from multiturn_envs.envs.terminal.env import TerminalEnv

pytestmark = pytest.mark.docker

# (command, text expected in the observation (or ""), one that must NOT appear)
CORPUS: list[tuple[str, str, str]] = [
    # contained either way: fork fails at the pids limit, or the command times out first
    (":(){ :|:& };: ; sleep 1; echo survived", "", ""),
    (
        "dd if=/dev/zero of=/app/fill bs=1M count=400 2>&1 | tail -1; df -m /app | tail -1; "
        "rm -f /app/fill",
        "100% /app",
        "",
    ),
    ("head -c 200M /dev/zero > /tmp/fill; echo rc=$?; rm -f /tmp/fill", "No space left", "rc=0"),
    ("python3 -c 'x = bytearray(2 << 30); print(\"allocated\")'", "", "allocated"),
    ("yes flood | head -c 50000000", "output truncated", ""),
    ("cat /dev/urandom | head -c 3000000 | base64 -w0", "output truncated", ""),
    ("touch /etc/owned /usr/bin/owned 2>&1; echo $?", "Read-only file system", ""),
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
    ("kill -9 $$", "", ""),
    ("kill -9 -1", "", ""),
]


def test_the_corpus_is_contained_and_the_env_keeps_working(terminal_ready: None) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=5, app_mb=64)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        env.step("cd /app && marker=kept")
        for command, expected, forbidden in CORPUS:
            obs, _, terminated, _, info = env.step(command)
            assert not terminated, command
            assert expected in obs, (command, obs[-600:])
            if forbidden:
                body = obs.rsplit("[exit status", 1)[0]
                assert forbidden not in body.replace(command, ""), (command, obs[-600:])
            assert len(obs) < env.output_cap + 600, command
            # a fork bomb's survivors can starve the next command: it times out, every process
            # of the agent is killed and the shell restarted with its state; then it works
            for _ in range(2):
                obs, *_ = env.step("echo ok $marker")
                if obs.startswith("ok kept"):
                    break
            assert obs.startswith("ok kept"), (command, obs[-600:])
        # the hidden checks never entered the agent's container; its own tampering is moot
        env.step("printf '#!/bin/sh\\nexit 0\\n' > /app/run-tests.sh; rm -f /app/fill")
        _, reward, terminated, _, info = env.step("submit")
        assert terminated and reward == 0.0 and not info["success"]
        ids = env.container_ids()
    finally:
        env.close()
    import docker

    alive = {c.id for c in docker.from_env().containers.list(all=True)}
    assert not alive & set(ids)


def test_a_memory_hog_is_killed_and_a_checker_killer_only_fails_its_own_checks(
    terminal_ready: None,
) -> None:
    env = TerminalEnv(max_turns=None, end_on_success=False, command_timeout_s=10)
    try:
        env.reset(seed=0, options={"task_id": "greet-script"})
        # a script that kills every process of its uid when the checker runs it
        env.step("printf '#!/bin/bash\\nkill -9 -1\\n' > greet.sh && chmod +x greet.sh")
        assert env.check_report().score < 1.0
        env.step(env.expert_action())  # off the path: the whole reference solution
        assert env.check_report().all_passed  # the checker was replaced and works
    finally:
        env.close()
