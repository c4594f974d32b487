"""MT/Terminal-v0 on the real engine: the contract, the shell, snapshots and the oracle."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import multiturn_envs  # noqa: F401  (registers MT/* ids)
from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.testing import check_text_env

pytestmark = pytest.mark.docker


def test_check_text_env(terminal_ready: None) -> None:
    check_text_env(
        lambda: gym.make("MT/Terminal-v0", max_turns=6, disable_env_checker=True),
        task_ids=["count-errors"],
        seeds=(0,),
        n_steps=3,
    )


def test_the_shell_persists_cwd_variables_functions_and_background_jobs(
    terminal_env: TerminalEnv,
) -> None:
    env = terminal_env
    obs, info = env.reset(seed=0, options={"task_id": "count-errors"})
    assert "ERROR" in obs and info["task_id"] == "count-errors"
    steps = [
        ("mkdir -p sub && cd sub && x=41", "[exit status: 0; cwd: /app/sub]"),
        ("greet() { echo hi $1; }; alias ll='ls -1'", "[exit status: 0; cwd: /app/sub]"),
        ("echo $((x + 1)); greet you; pwd", "42\nhi you\n/app/sub\n"),
        ("(sleep 0.3; echo late > /app/bg.txt) & echo started", "started\n"),
        ("wait; cat /app/bg.txt", "late\n"),
        ("echo out; echo err >&2; echo out2; false", "out\nerr\nout2\n[exit status: 1; "),
        ("cat; read line; echo read=$?", "read=1\n"),  # stdin is empty, never the protocol
    ]
    for command, expected in steps:
        obs, _, terminated, _, info = env.step(command)
        assert expected in obs and not terminated, (command, obs)
    assert info["exit_code"] == 0 and info["cwd"] == "/app/sub"


def test_output_is_capped_with_a_marker_and_a_timeout_restarts_the_shell(
    terminal_env: TerminalEnv,
) -> None:
    env = terminal_env
    env.reset(seed=0, options={"task_id": "count-errors"})
    obs, *_, info = env.step("seq 1 300000")
    assert obs.startswith("1\n2\n3\n") and "300000\n[exit status: 0" in obs
    assert "output truncated" in obs and info["output_truncated"]
    assert len(obs) < env.output_cap + 200
    env.step("cd /tmp && export KEEP=yes && y=2")
    saved, env.command_timeout_s = env.command_timeout_s, 1.0
    try:
        obs, *_, info = env.step("echo before; sleep 20")
        assert "before" in obs and "did not finish within 1 s" in obs
        assert info["timed_out"] and info["shell_restarted"] and info["exit_code"] is None
        obs, *_ = env.step("echo $KEEP $y; pwd")
        assert obs.startswith("yes 2\n/tmp\n")  # the state saved after the last command
        obs, *_, info = env.step("exit 3")
        assert "shell exited" in obs and info["shell_restarted"]
        obs, *_, info = env.step("set -e; false")
        assert info["shell_restarted"]
        obs, *_, info = env.step("exec >/dev/null")  # wedged: no answer, killed at the timeout
        assert info["shell_restarted"]
        obs, *_ = env.step("echo alive $KEEP; pwd")
        assert obs.startswith("alive yes\n/tmp\n")
    finally:
        env.command_timeout_s = saved


def test_snapshots_restore_files_cwd_and_variables_on_a_fresh_container(
    terminal_env: TerminalEnv,
) -> None:
    env = terminal_env
    env.reset(seed=0, options={"task_id": "count-errors"})
    env.step("mkdir -p w && cd w && echo one > f.txt && v=1 && chmod 600 f.txt")
    state = env.get_state()
    container = env._episode.box.id
    env.step("echo two > f.txt && v=2 && cd / && rm -rf /app/w")
    env.set_state(state)
    assert env._episode.box.id != container
    obs, *_ = env.step("cat f.txt; echo $v; pwd; stat -c %a f.txt")
    assert obs.startswith("one\n1\n/app/w\n600\n")
    assert env.state_key() != ""


def test_oracle_expert_error_and_off_path_approximation(terminal_env: TerminalEnv) -> None:
    env = terminal_env
    env.reset(seed=0, options={"task_id": "csv-column-sum"})
    expert = env.expert_action()
    assert expert == env.task().solution[0]
    rng = np.random.default_rng(0)
    errors = {env.error_action(rng) for _ in range(10)}
    assert expert not in errors and "submit" not in errors
    before = env.get_state()
    assert env.score_action(expert) == 1.0
    assert all(env.score_action(e) < 1.0 for e in sorted(errors)[:2])
    assert env.get_state()["env"]["digest"] == before["env"]["digest"]
    _, _, terminated, _, info = env.step(sorted(errors)[0])
    assert not terminated and info["step_score"] < 1.0
    off = env.expert_action()  # off the reference path: the whole solution as one script
    assert off.startswith("cd /app\n") and env.task().solution[0] in off
    _, _, _, _, info = env.step(off)
    assert info["success"] and env.expert_action() == "submit"


def test_nothing_of_an_episode_reaches_the_next_and_close_removes_every_container(
    terminal_ready: None,
) -> None:
    import docker

    env = TerminalEnv(warm=1)
    try:
        env.reset(seed=0, options={"task_id": "count-errors"})
        env.step("echo secret > /app/left.txt; echo x > /tmp/left; sleep 300 &")
        env.reset(seed=0, options={"task_id": "count-errors"})
        obs, *_ = env.step("ls /app /tmp; pgrep -f 'sleep 300'")
        assert "left" not in obs and obs.endswith("[exit status: 1; cwd: /app]")
        ids = env.container_ids()
        assert ids
    finally:
        env.close()
    client = docker.from_env()
    alive = {c.id for c in client.containers.list(all=True)}
    assert not alive & set(ids)
    env.close()  # idempotent


def test_a_container_that_cannot_run_a_shell_is_replaced_with_the_state_carried_over(
    terminal_env: TerminalEnv,
) -> None:
    """The last resort after a failed shell restart (e.g. a fork bomb holding every pid)."""
    env = terminal_env
    env.reset(seed=0, options={"task_id": "count-errors"})
    env.step("mkdir -p d && cd d && echo kept > f.txt && v=7")
    old = env._episode.box.id
    result = env._move_to_fresh_container(RuntimeError("simulated"))
    assert "moved to a fresh container" in result.output and result.cwd == "/app/d"
    assert env._episode.box.id != old
    obs, *_ = env.step("cat f.txt; echo $v")
    assert obs.startswith("kept\n7\n")


def test_an_env_never_closed_leaves_no_container_when_its_process_exits(
    terminal_ready: None,
) -> None:
    import json
    import subprocess
    import sys

    import docker

    script = (
        "import json, gymnasium as gym, multiturn_envs\n"
        "env = gym.make('MT/Terminal-v0', disable_env_checker=True)\n"
        "env.reset(seed=0, options={'task_id': 'count-errors'})\n"
        "env.step('ls')\n"
        "print(json.dumps(env.unwrapped.container_ids()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, check=True
    )
    ids = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(ids) >= 2  # the episode's container (warm ones too) and the checker's
    alive = {c.id for c in docker.from_env().containers.list(all=True)}
    assert not alive & set(ids)
