"""``--isolation pool``: sessions sharing a worker process survive what stops their neighbour.

Real ``multiturn-envs serve`` processes on 127.0.0.1 with ONE pool worker, so that every
session shares it: a neighbour's step that overruns its timeout, or a worker killed from
outside, moves the other sessions to a fresh worker, where they are restored by replay and go
on exactly as the same actions in-process do (snapshots included); a session whose replay
differs, or whose replay log is over its bound, is closed with a message that says why.
Wall-clock asserts are generous bounds (the machine may be loaded).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_server_hostile import PROBE, Client, code_of, stats, wait_until

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.server import protocol as p
from multiturn_envs.server.process import ServerProcess
from multiturn_envs.testing.probe import PROBE_ID

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def pool1() -> Iterator[str]:
    """A probe server with one pool worker: every session is a neighbour of every other."""
    flags = [
        "--pool-workers", "1", "--request-timeout", str(TIMEOUT_S), "--close-timeout", "1",
        "--max-replay-requests", "20",
    ]  # fmt: skip
    with ServerProcess(PROBE, args=flags, stop_timeout_s=30) as url:
        yield url


class Local:
    """The same episode in-process: what a served session must answer, step for step."""

    def __init__(self, secret: int) -> None:
        self.env = gym.make(PROBE_ID, disable_env_checker=True)
        self.env.reset(seed=0, options={"task_id": f"secret-{secret}"})
        self.saved: Any = None

    def step(self, action: str) -> tuple[str, float, bool]:
        observation, reward, terminated, truncated, _ = self.env.step(action)
        return observation, float(reward), bool(terminated or truncated)

    def snapshot(self) -> None:
        self.saved = self.env.unwrapped.get_state()  # type: ignore[attr-defined]

    def restore(self) -> None:
        self.env.unwrapped.set_state(self.saved)  # type: ignore[attr-defined]


def outcome(reply: dict[str, Any]) -> tuple[str, float, bool]:
    assert reply["type"] == "observation", reply
    data = reply["data"]
    return data["observation"]["text"], float(data["reward"]), bool(data["done"])


def tool(c: Client, name: str, **arguments: Any) -> Any:
    frame = {
        "type": "step",
        "data": {"type": "call_tool", "tool_name": name, "arguments": arguments},
    }
    reply = c.send(frame)
    assert reply["type"] == "observation" and reply["data"]["observation"]["error"] is None, reply
    return reply["data"]["observation"]["result"]["data"]


def episode(url: str, secret: int) -> tuple[Client, Local]:
    c = Client(url)
    assert c.reset(secret)["type"] == "observation"
    return c, Local(secret)


def both(c: Client, local: Local, action: str) -> None:
    assert outcome(c.step(action)) == local.step(action), action


def test_neighbours_of_a_timed_out_step_are_moved_and_go_on_exactly(pool1: str) -> None:
    """request_timeout_s with shared workers: a step spinning in C with the GIL held is
    stopped (TIMEOUT, its worker killed); its two neighbours, one with a snapshot taken and
    one with a step in flight, are moved to a fresh worker and go on exactly as in-process."""
    before = stats(pool1)
    (a, la), (b, lb) = episode(pool1, 11), episode(pool1, 3)
    spinner = Client(pool1)
    spinner.reset(5)
    both(a, la, "guess 8")
    sid = tool(b, "snapshot")["snapshot_id"]
    lb.snapshot()
    both(b, lb, "guess 8")
    pid = stats(pool1)["pool_worker_pids"][0]
    spinner.ws.send(json.dumps({"type": "step", "data": {"text": "regex 40"}}))
    time.sleep(0.3)  # the worker spins now; its other sessions' requests queue behind
    start = time.monotonic()
    both(a, la, "guess 12")  # in flight when the worker is killed: sent again once moved
    assert time.monotonic() - start < TIMEOUT_S + 15
    reply = json.loads(spinner.ws.recv(timeout=30))
    assert code_of(reply) == p.TIMEOUT and "moved" in reply["data"]["message"]
    wait_until(lambda: not alive(pid), 15, "the spinning worker to be killed")
    restored = tool(b, "restore", snapshot_id=sid)["observation"]
    lb.restore()
    assert restored == lb.env.unwrapped.current_observation()  # type: ignore[attr-defined]
    for action in ("guess 1", "guess 4", "guess 3"):
        both(b, lb, action)
    both(a, la, "guess 10")
    both(a, la, "guess 11")
    after = stats(pool1)
    assert after["sessions_timed_out"] == before["sessions_timed_out"] + 1
    assert after["pool_sessions_moved"] >= before["pool_sessions_moved"] + 2
    assert after["pool_workers"] == 1 and after["pool_worker_pids"][0] != pid
    for c in (a, b):
        c.close()


def worker_pid(url: str) -> int:
    """The pid of the pool's first worker, once one is up (it may be starting)."""
    found: list[int] = []

    def up() -> bool:
        pids = stats(url)["pool_worker_pids"]
        found[:] = [pid for pid in pids[:1] if isinstance(pid, int)]
        return bool(found)

    wait_until(up, 20, "a worker")
    return found[0]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_worker_killed_from_outside_moves_all_its_sessions(pool1: str) -> None:
    """A worker that dies while idle (SIGKILL: the OOM killer, an operator) is replaced; its
    sessions all move and go on exactly; /stats counts the moves and the replacement."""
    before = stats(pool1)
    sessions = [episode(pool1, secret) for secret in (2, 7, 13)]
    for c, local in sessions:
        both(c, local, "guess 8")
    os.kill(worker_pid(pool1), signal.SIGKILL)
    for c, local in sessions:
        both(c, local, "guess 4")
        both(c, local, "guess 6")
    after = stats(pool1)
    assert after["pool_sessions_moved"] == before["pool_sessions_moved"] + 3
    assert after["pool_workers_replaced"] == before["pool_workers_replaced"] + 1
    assert after["pool_restore_failures"] == before["pool_restore_failures"]
    for c, _ in sessions:
        c.close()


def test_a_session_whose_replay_differs_or_whose_log_is_over_its_bound_is_closed(
    pool1: str,
) -> None:
    """A session that is not deterministic on replay, or whose replay log went over
    max_replay_requests, is closed with EXECUTION_ERROR saying why, never served another
    state; the session beside them is moved as usual."""
    noisy, long, fine = Client(pool1), Client(pool1), Client(pool1)
    noisy.reset()
    assert noisy.step("random")["type"] == "observation"
    for _ in range(21):  # unseeded resets: no start point, each one kept for the replay
        assert (
            long.send({"type": "reset", "data": {"task_id": "secret-1"}})["type"] == "observation"
        )
    fine_local = episode(pool1, 9)
    fine = fine_local[0]
    both(fine, fine_local[1], "guess 8")
    before = stats(pool1)
    os.kill(worker_pid(pool1), signal.SIGKILL)
    both(fine, fine_local[1], "guess 10")
    for c, why in ((noisy, "not deterministic"), (long, "over the replay log's bound")):
        reply = c.step("guess 1")
        assert code_of(reply) == p.EXECUTION_ERROR, reply
        message = reply["data"]["message"]
        assert "could not be restored" in message and why in message, message
    assert stats(pool1)["pool_restore_failures"] == before["pool_restore_failures"] + 2


def test_read_only_requests_never_fill_the_replay_log(pool1: str) -> None:
    """Bound: ``--max-replay-requests`` (20 here) counts only requests that change a session's
    state. A session that asked for its tools (MCP ``tools/list`` over the WebSocket and over
    HTTP, OpenEnv's ``list_tools`` step), ``describe``, its state and its messages 40 times
    since its seeded reset, and a session refused 25 times (steps after its episode ended) are
    moved, not closed, when a neighbour's step overruns its timeout, and go on exactly."""
    reader, local = episode(pool1, 5)
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    describe = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "describe"}}
    listing = {"type": "step", "data": {"type": "list_tools"}}
    for _ in range(8):
        assert reader.send({"type": "mcp", "data": rpc})["type"] == "mcp"
        assert reader.send({"type": "mcp", "data": describe})["data"]["result"]["data"]
        assert reader.send(listing)["type"] == "observation"
        assert reader.send({"type": "state"})["type"] == "state"
        assert tool(reader, "messages")
    over = Client(pool1)
    over.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-2", "max_turns": 1}})
    assert over.step("guess 2")["data"]["done"]
    for _ in range(25):
        assert code_of(over.step("guess 3")) == p.EPISODE_OVER
    session = httpx.post(f"{pool1}/sessions", json={}, timeout=10).json()["session_id"]
    assert httpx.post(f"{pool1}/sessions/{session}/reset", json={"seed": 0}, timeout=10).is_success
    for _ in range(25):
        params = {"session_id": session}
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": params}
        assert "result" in httpx.post(f"{pool1}/mcp", json=body, timeout=10).json()
        assert httpx.get(f"{pool1}/sessions/{session}/state", timeout=10).is_success
    before = stats(pool1)
    spinner = Client(pool1)
    spinner.reset(5)
    assert code_of(spinner.step("regex 40")) == p.TIMEOUT
    both(reader, local, "guess 8")
    assert code_of(over.step("guess 3")) == p.EPISODE_OVER
    assert "observation" in over.send({"type": "reset", "data": {"seed": 1}})["type"]
    step = {"action": {"text": "guess 4"}}
    assert httpx.post(f"{pool1}/sessions/{session}/step", json=step, timeout=30).is_success
    after = stats(pool1)
    assert after["pool_restore_failures"] == before["pool_restore_failures"]
    assert after["pool_sessions_moved"] >= before["pool_sessions_moved"] + 3
    for c in (reader, over, spinner):
        c.close()


def test_a_slow_but_legal_neighbour_does_not_time_out_another_session(pool1: str) -> None:
    """request_timeout_s counts a call's own run: two steps that each hold the GIL for
    0.65 x the timeout, the second sent while the first runs, both answer (the second waited
    behind the first, then ran: past the timeout on the wall clock, not in its own time)."""
    hold = f"hold {0.65 * TIMEOUT_S:.2f}"
    first, second = episode(pool1, 4), episode(pool1, 6)
    replies: dict[str, dict[str, Any]] = {}

    def step(name: str, c: Client) -> None:
        replies[name] = c.step(hold)

    threads = [threading.Thread(target=step, args=("first", first[0]))]
    threads[0].start()
    time.sleep(0.2 * TIMEOUT_S)
    threads.append(threading.Thread(target=step, args=("second", second[0])))
    threads[1].start()
    for t in threads:
        t.join(60)
    assert replies["first"]["type"] == "observation", replies["first"]
    assert replies["second"]["type"] == "observation", replies["second"]
    for c, local in (first, second):
        local.step("hold 0")  # the same turn in-process, without the wait
        both(c, local, "guess 8")


# ------------------------------------------------------------------------------ generated
@pytest.fixture(scope="module")
def frozenlake_pool() -> Iterator[str]:
    with ServerProcess("MT/FrozenLake-v0", args=["--pool-workers", "1"]) as url:
        yield url


TASKS = ("random-s4-p0.8-n0", "random-s4-p0.8-n7", "8x8", "random-s6-p0.7-n3")
MOVES = ("<answer>left</answer>", "<answer>down</answer>", "<answer>right</answer>",
         "<answer>up</answer>", "no idea")  # fmt: skip


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tasks=st.lists(st.sampled_from(TASKS), min_size=2, max_size=3),
    script=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, len(MOVES) - 1) | st.just(-1)),
        min_size=1,
        max_size=14,
    ),
)
def test_any_interleaving_with_worker_kills_gives_each_session_its_in_process_trajectory(
    frozenlake_pool: str, tasks: list[str], script: list[tuple[int, int]]
) -> None:
    """Sessions sharing one worker, stepped in any order, with the worker killed at any
    point (-1): each session's observations and rewards are those of its episode
    in-process."""
    clients, locals_ = [], []
    for i, task in enumerate(tasks):
        c = Client(frozenlake_pool)
        frame = {"type": "reset", "data": {"seed": i, "task_id": task, "max_turns": 6}}
        assert (first := c.send(frame))["type"] == "observation", first
        env = gym.make("MT/FrozenLake-v0", disable_env_checker=True, max_turns=6)
        env.reset(seed=i, options={"task_id": task})
        clients.append(c)
        locals_.append((env, [False]))
    try:
        for who, move in script:
            who %= len(clients)
            if move < 0:
                with contextlib.suppress(ProcessLookupError):  # it may have died already
                    os.kill(worker_pid(frozenlake_pool), signal.SIGKILL)
                continue
            env, over = locals_[who]
            reply = clients[who].step(MOVES[move])
            if over[0]:
                assert code_of(reply) == p.EPISODE_OVER, reply
                continue
            observation, reward, terminated, truncated, _ = env.step(MOVES[move])
            over[0] = bool(terminated or truncated)
            assert outcome(reply) == (observation, float(reward), over[0])
    finally:
        for c in clients:
            c.close()
