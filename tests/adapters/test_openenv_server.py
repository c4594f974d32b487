"""The env server under abuse: hostile requests, limits, crashes, timeouts, idle and lost clients.

Servers here are real uvicorn servers on 127.0.0.1 (in a thread of the test process, or a child
process), and stop when the test ends. Envs run in worker processes (the default isolation), so
a test sees that ``close()`` ran through :class:`ProbeEnv`'s close log. tests/server/ holds the
adversarial suite (limits, timeouts, connections, malformed frames).
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from websockets.sync.client import connect

from multiturn_envs.server import protocol as p
from multiturn_envs.server.app import create_app
from multiturn_envs.server.process import ServerProcess
from multiturn_envs.server.remote_env import ws_url
from multiturn_envs.server.serve import serve
from multiturn_envs.testing import GuessEnv
from multiturn_envs.testing.probe import ProbeEnv

GUESS = functools.partial(GuessEnv, max_turns=6)
"""A picklable factory: each session's env is built in its worker process."""


class CloseLog:
    """How many envs of a server have closed (``len``), read from ProbeEnv's close log."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __len__(self) -> int:
        return len(self.path.read_text().splitlines()) if self.path.exists() else 0


@contextlib.contextmanager
def thread_server(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 in a thread; stopped (sessions closed) on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(app, log_level="error", ws_max_size=1 << 20)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


@contextlib.contextmanager
def probe(idle_timeout_s: float) -> Iterator[tuple[str, CloseLog]]:
    with tempfile.TemporaryDirectory(prefix="mte-probe-") as tmp:
        log = Path(tmp) / "closed.log"
        limits = p.ServerLimits(
            max_sessions=3,
            max_sessions_per_client=3,  # every client here is 127.0.0.1
            idle_timeout_s=idle_timeout_s,
            request_timeout_s=0.5,
            close_timeout_s=2.0,
            max_request_bytes=4096,
            pool_workers=3,  # a worker per session: the close log has one line per session
        )  # (a session moved off a stopped worker closes its old env too: tests/server)
        factory = functools.partial(ProbeEnv, max_turns=6, close_log=str(log))
        app = create_app("Probe", limits=limits, make_env=factory)
        with thread_server(app) as url:
            yield url, CloseLog(log)


@pytest.fixture
def probe_server() -> Iterator[tuple[str, CloseLog]]:
    """Three sessions at most, 0.5 s per request, 4 KiB per message, 30 s idle."""
    with probe(30.0) as served:
        yield served


@pytest.fixture
def short_idle_server() -> Iterator[tuple[str, CloseLog]]:
    """The same with sessions reaped after 1 s idle."""
    with probe(1.0) as served:
        yield served


class Socket:
    """A raw OpenEnv session over a WebSocket, for sending anything at all."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.ws = connect(ws_url(url), additional_headers=headers, max_size=None).__enter__()

    def send(self, frame: Any) -> dict[str, Any]:
        self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))
        return dict(json.loads(self.ws.recv(timeout=10)))

    def close(self) -> None:
        self.ws.close()


def wait_until(
    predicate: Callable[[], bool], tick: Callable[[], None] | None = None, timeout: float = 10.0
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        if tick is not None:
            tick()
        time.sleep(0.05)


def play(url: str, secret: int) -> list[str]:
    """A whole binary-search episode; its observations."""
    s = Socket(url)
    try:
        seen = [s.send({"type": "reset", "data": {"seed": 0, "task_id": f"secret-{secret}"}})]
        lo, hi = 0, 15
        while not seen[-1]["data"]["done"]:
            guess = (lo + hi) // 2
            reply = s.send({"type": "step", "data": {"text": f"guess {guess}"}})
            text = reply["data"]["observation"]["text"].lower()
            lo, hi = (guess + 1, hi) if "higher" in text else (lo, guess - 1)
            seen.append(reply)
        return [r["data"]["observation"]["text"] for r in seen]
    finally:
        s.close()


def expected_play(secret: int) -> list[str]:
    env = GuessEnv(max_turns=6)
    obs, _ = env.reset(seed=0, options={"task_id": f"secret-{secret}"})
    seen, lo, hi, done = [obs], 0, 15, False
    while not done:
        guess = (lo + hi) // 2
        obs, _, term, trunc, _ = env.step(f"guess {guess}")
        lo, hi = (guess + 1, hi) if "higher" in obs.lower() else (lo, guess - 1)
        seen.append(obs)
        done = term or trunc
    return seen


def code_of(reply: dict[str, Any]) -> str:
    assert reply["type"] == "error", reply
    return str(reply["data"]["code"])


def test_hostile_requests_get_clear_errors_and_the_server_keeps_serving(
    probe_server: tuple[str, CloseLog],
) -> None:
    url, _ = probe_server
    http = httpx.Client(base_url=url, timeout=10)
    s = Socket(url)
    # over the socket: each bad frame gets an error frame, the socket stays usable
    assert code_of(s.send("{not json")) == p.INVALID_JSON
    assert code_of(s.send("[1, 2]")) == p.INVALID_JSON
    assert code_of(s.send(b"\xff\xfe garbage")) == p.INVALID_JSON
    assert code_of(s.send({"type": "teleport"})) == p.UNKNOWN_TYPE
    assert code_of(s.send({"type": "step", "data": {"text": "guess 1"}})) == p.RESET_NEEDED
    assert code_of(s.send({"type": "reset", "data": {"seed": -1}})) == p.VALIDATION_ERROR
    assert code_of(s.send({"type": "reset", "data": {"task_id": "nope"}})) == p.VALIDATION_ERROR
    assert code_of(s.send({"type": "reset", "data": {"max_turns": 0}})) == p.VALIDATION_ERROR
    assert code_of(s.send({"type": "reset", "data": "x"})) == p.VALIDATION_ERROR
    assert code_of(s.send({"type": "step", "data": {"txt": "guess 1"}})) == p.VALIDATION_ERROR
    assert code_of(s.send({"type": "step", "data": {"text": 7}})) == p.VALIDATION_ERROR
    assert code_of(s.send({"type": "step"})) == p.VALIDATION_ERROR
    big = {"type": "step", "data": {"text": "x" * 5000}}
    assert code_of(s.send(big)) == p.TOO_LARGE
    reply = s.send({"type": "reset", "data": {"seed": 1, "task_id": "secret-3", "bogus": 1}})
    assert reply["type"] == "observation" and reply["data"]["metadata"]["ignored_reset_keys"] == [
        "bogus"
    ]
    tool = s.send({"type": "step", "data": {"type": "call_tool", "tool_name": "rm -rf"}})
    assert tool["data"]["observation"]["error"]["error_type"] == "tool_not_found"
    tool = s.send(
        {"type": "step", "data": {"type": "call_tool", "tool_name": "restore", "arguments": {}}}
    )
    assert tool["data"]["observation"]["error"]["error_type"] == "invalid_args"
    rng_state = {"bit_generator": "MT19937", "state": {}}
    tool = s.send(
        {
            "type": "step",
            "data": {
                "type": "call_tool",
                "tool_name": "random_action",
                "arguments": {"rng_state": rng_state},
            },
        }
    )
    assert tool["data"]["observation"]["error"]["error_type"] == "invalid_args"
    assert s.send({"type": "step", "data": {"text": "guess 3"}})["data"]["done"] is True
    assert code_of(s.send({"type": "step", "data": {"text": "guess 3"}})) == p.EPISODE_OVER
    s.close()
    # over HTTP: the same codes with their status
    for body, status, code in [
        (b"{oops", 400, p.INVALID_JSON),
        (b"null", 400, p.INVALID_JSON),
        (b"x" * 5000, 413, p.TOO_LARGE),
    ]:
        r = http.post("/sessions", content=body)
        assert (r.status_code, r.json()["code"]) == (status, code)
    r = http.post("/sessions/not-a-session/step", json={"action": {"text": "guess 1"}})
    assert (r.status_code, r.json()["code"]) == (404, p.UNKNOWN_SESSION)
    assert http.post("/step", json={"action": {"text": "x"}}).status_code == 409
    sid = http.post("/sessions").json()["session_id"]
    r = http.post(f"/sessions/{sid}/reset", json={"seed": 0, "task_id": "secret-8"})
    assert r.status_code == 200
    r = http.post(f"/sessions/{sid}/step", json={"action": {"text": "guess 8"}})
    assert r.json()["done"] is True
    r = http.post(f"/sessions/{sid}/step", json={"action": {"text": "guess 8"}})
    assert (r.status_code, r.json()["code"]) == (409, p.EPISODE_OVER)
    r = http.post(f"/sessions/{sid}/step", json={"nope": 1})
    assert (r.status_code, r.json()["code"]) == (422, p.VALIDATION_ERROR)
    assert http.delete(f"/sessions/{sid}").status_code == 200
    assert http.delete(f"/sessions/{sid}").status_code == 404
    # raw bytes that are not HTTP at all
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5) as raw:
        raw.sendall(b"\x16\x03\x01\x00\xa5 not http \r\n\r\n")
        with contextlib.suppress(OSError):
            raw.recv(1024)
    # and it still serves a whole episode correctly
    assert http.get("/health").json() == {"status": "healthy"}
    assert play(url, 11) == expected_play(11)
    http.close()


@pytest.fixture(scope="module")
def guess_socket() -> Iterator[Socket]:
    """One session for every generated frame: each must leave it usable."""
    with thread_server(create_app("Probe", make_env=GUESS)) as url:
        s = Socket(url)
        yield s
        s.close()


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.sampled_from(["type", "data", "text", "seed", "task_id"]), children
            )
        ),
        max_leaves=12,
    )
)
def test_any_json_frame_gets_one_reply_and_the_session_survives(
    guess_socket: Socket, frame: Any
) -> None:
    reply = guess_socket.send(json.dumps(frame))
    assert reply["type"] in ("error", "observation", "state")
    after = guess_socket.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-5"}})
    assert after["type"] == "observation"


def test_sessions_are_isolated_under_concurrency(probe_server: tuple[str, CloseLog]) -> None:
    url, _ = probe_server
    results: dict[int, list[str]] = {}

    def client(secret: int) -> None:
        results[secret] = play(url, secret)

    threads = [threading.Thread(target=client, args=(k,)) for k in (2, 9, 14)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert {k: results[k] for k in (2, 9, 14)} == {k: expected_play(k) for k in (2, 9, 14)}


def test_crash_timeout_idle_and_lost_clients_close_only_their_own_env(
    short_idle_server: tuple[str, CloseLog],
) -> None:
    url, closed = short_idle_server
    http = httpx.Client(base_url=url, timeout=10)
    keeper = Socket(url)  # a healthy session that must survive everything below
    keeper.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-7"}})

    def keep_alive() -> None:
        reply = keeper.send({"type": "state"})
        assert reply["type"] == "state" and reply["data"]["task_id"] == "secret-7"

    # capacity: 3 sessions; the 4th is refused, and served once one closes
    a, b = Socket(url), Socket(url)
    c = Socket(url)
    assert code_of(dict(json.loads(c.ws.recv(timeout=10)))) == p.CAPACITY_REACHED
    assert http.post("/sessions").status_code == 503
    # crash: the env raises -> EXECUTION_ERROR, that session closed, its env closed
    a.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-1"}})
    assert code_of(a.send({"type": "step", "data": {"text": "crash"}})) == p.EXECUTION_ERROR
    wait_until(lambda: len(closed) == 1, keep_alive)
    # timeout: a step past request_timeout -> TIMEOUT; the step is interrupted, the env closed
    b.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-1"}})
    assert code_of(b.send({"type": "step", "data": {"text": "sleep 1.5"}})) == p.TIMEOUT
    wait_until(lambda: len(closed) == 2, keep_alive)
    # a lost client (socket dropped without a close frame): its session goes at once
    d = Socket(url)
    d.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-1"}})
    d.ws.socket.close()
    wait_until(lambda: len(closed) == 3, keep_alive)
    # idle: an HTTP session nobody uses is reaped after idle_timeout_s (1 s); the keeper
    # stays active, so only the idle one goes
    sid = http.post("/sessions").json()["session_id"]
    wait_until(lambda: len(closed) == 4, keep_alive)
    r = http.post(f"/sessions/{sid}/reset", json={})
    assert (r.status_code, r.json()["code"]) == (404, p.UNKNOWN_SESSION)
    keep_alive()
    assert keeper.send({"type": "step", "data": {"text": "guess 7"}})["data"]["done"] is True
    stats = http.get("/stats").json()
    assert stats["sessions_crashed"] == 1 and stats["sessions_reaped"] >= 1
    keeper.close()
    wait_until(lambda: len(closed) == 5)
    http.close()


def test_an_idle_websocket_is_closed_by_the_server(
    short_idle_server: tuple[str, CloseLog],
) -> None:
    url, closed = short_idle_server
    s = Socket(url)
    s.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-1"}})
    wait_until(lambda: len(closed) == 1)
    with pytest.raises(Exception, match=r"1001|idle"):
        s.send({"type": "state"})


def test_tokens_and_binding() -> None:
    with pytest.raises(ValueError, match="bearer token"):
        serve("MT/FrozenLake-v0", host="0.0.0.0", port=0)  # refused before binding
    app = create_app("Probe", make_env=GUESS, token="t0k")
    with thread_server(app) as url:
        assert httpx.get(f"{url}/health").status_code == 200  # liveness needs no token
        assert httpx.get(f"{url}/schema").status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert httpx.get(f"{url}/schema", headers=bad).status_code == 401
        good = {"Authorization": "Bearer t0k"}
        assert httpx.get(f"{url}/schema", headers=good).json()["action"]["required"] == ["text"]
        with pytest.raises(Exception, match=r"403|1008"):
            Socket(url, headers=bad).send({"type": "state"})
        assert Socket(url, headers=good).send({"type": "state"})["type"] == "state"


def test_the_server_process_reports_bad_arguments() -> None:
    with pytest.raises(RuntimeError, match="unknown env id"):
        ServerProcess("MT/Nope-v0").start()
    with pytest.raises(RuntimeError, match=r"TypeError|unexpected"):
        ServerProcess("MT/FrozenLake-v0", {"no_such_kwarg": 1}).start()


def test_oracle_tools_and_snapshots_over_the_wire() -> None:
    from multiturn_envs.server.remote_env import open_remote_env

    with thread_server(create_app("Probe", make_env=GUESS)) as url:
        env = open_remote_env(url)
        local = GuessEnv(max_turns=6)
        try:
            for e in (env, local):
                e.reset(seed=3, options={"task_id": "secret-13"})
            assert env.expert_action() == local.expert_action()
            assert env.score_action("guess 1") == local.score_action("guess 1")
            snap = env.get_state()
            first = env.step("guess 1")
            env.set_state(snap)
            assert env.step("guess 1") == first  # the same step from the restored state
            assert env.messages() == [
                {"role": "user", "content": local.current_observation()},
                {"role": "assistant", "content": "guess 1"},
                {"role": "user", "content": first[0]},
            ]
            r1, r2 = np.random.default_rng(5), np.random.default_rng(5)
            assert env.error_action(r1) == local.error_action(r2)
            assert r1.bit_generator.state == r2.bit_generator.state  # advanced alike
        finally:
            env.close()
            local.close()


def test_the_proxy_refuses_another_env_and_reports_a_reaped_session(
    short_idle_server: tuple[str, CloseLog],
) -> None:
    from multiturn_envs.server.remote_env import RemoteEnvError, open_remote_env

    url, closed = short_idle_server
    with pytest.raises(ValueError, match="serves 'Probe', not 'MT/FrozenLake-v0'"):
        open_remote_env(url, expect_env_id="MT/FrozenLake-v0")
    env = open_remote_env(url, expect_env_id="Probe")
    env.reset(seed=0, options={"task_id": "secret-4"})
    wait_until(lambda: len(closed) == 2)  # the refused one, then this one after 1 s idle
    with pytest.raises(RemoteEnvError, match="closed the session") as info:
        env.step("guess 4")
    assert info.value.code == p.SESSION_ERROR
    env.close()


def test_long_observations_are_cut_and_said_so() -> None:
    limits = p.ServerLimits(max_observation_chars=50)
    # a budget note: a longer text
    make = functools.partial(GuessEnv, max_turns=6, budget_mode="announced")

    with thread_server(create_app("Probe", limits=limits, make_env=make)) as url:
        s = Socket(url)
        full, _ = make().reset(seed=0, options={"task_id": "secret-3"})
        reply = s.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-3"}})
        text = reply["data"]["observation"]["text"]
        assert len(full) > 50 and reply["data"]["metadata"]["observation_cut"] == len(full)
        assert len(text) <= 50 and "characters cut" in text
        assert text.startswith(full[:5]) and text.endswith(full[-5:])
        s.close()


def test_openenv_http_routes_and_env_args() -> None:
    from multiturn_envs.env_args import parse_env_args
    from multiturn_envs.server.serve import is_loopback

    with thread_server(create_app("Probe", make_env=GUESS)) as url:
        http = httpx.Client(base_url=url, timeout=10)
        reset = http.post("/reset", json={"seed": 0, "task_id": "secret-2"}).json()
        assert reset["done"] is False and reset["reward"] is None
        assert reset["observation"]["text"].startswith("Guess my number")
        assert http.get("/state").json() == {"episode_id": None, "step_count": 0}
        assert http.get("/metadata").json()["name"] == "Probe"
        schema = http.get("/schema").json()
        assert set(schema) == {"action", "observation", "state"}
        assert http.get("/stats").json()["active_sessions"] == 0  # /reset closed its env
        http.close()
    assert parse_env_args(["max_turns=8", "backend=docker", 'opts={"a": [1]}']) == {
        "max_turns": 8,
        "backend": "docker",
        "opts": {"a": [1]},
    }
    for bad in (["novalue"], ["1x=2"]):
        with pytest.raises(ValueError, match="key=value"):
            parse_env_args(bad)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")


@given(st.text(max_size=400), st.integers(min_value=1, max_value=300))
def test_cut_keeps_head_and_tail_within_the_limit(text: str, limit: int) -> None:
    shown, original = p.cut(text, limit)
    if len(text) <= limit:
        assert (shown, original) == (text, None)
        return
    assert original == len(text)
    marker = f"\n[...{len(text)} characters cut...]\n"
    assert len(shown) <= max(limit, len(marker) + 2)
    head, _, tail = shown.partition(marker)
    assert text.startswith(head) and text.endswith(tail) and head and tail


def test_thread_isolation_serves_in_process_and_refuses_unpicklable_factories() -> None:
    """isolation="thread": envs on threads of the server (any factory, even a lambda); a
    crash still closes only its session. With process isolation a factory that cannot
    travel to a worker process is refused up front."""
    with pytest.raises(ValueError, match="must pickle"):
        create_app("Probe", make_env=lambda: GuessEnv(max_turns=6))
    limits = p.ServerLimits(max_sessions=4, max_sessions_per_client=4, request_timeout_s=0.5)
    app = create_app(
        "Probe", limits=limits, make_env=lambda: ProbeEnv(max_turns=6), isolation="thread"
    )
    with thread_server(app) as url:
        assert play(url, 6) == expected_play(6)
        s = Socket(url)
        s.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-1"}})
        assert code_of(s.send({"type": "step", "data": {"text": "crash"}})) == p.EXECUTION_ERROR
        t = Socket(url)
        t.send({"type": "reset", "data": {"seed": 0, "task_id": "secret-1"}})
        assert code_of(t.send({"type": "step", "data": {"text": "sleep 1"}})) == p.TIMEOUT
        assert httpx.get(f"{url}/stats", timeout=10).json()["isolation"] == "thread"
        assert play(url, 12) == expected_play(12)
