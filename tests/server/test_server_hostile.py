"""The env server against hostile clients and hostile envs: each test names the limit it checks.

Every server is a real ``multiturn-envs serve`` process on 127.0.0.1 serving
:class:`~multiturn_envs.testing.probe.ProbeEnv` (an env that spins in a GIL-holding regex,
segfaults or eats memory on command), driven over real sockets. Clients that must count as
*other* clients connect from 127.0.0.2 (all of 127.0.0.0/8 is loopback). Wall-clock asserts
are generous bounds on this runner's own clock (the machine may be loaded).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from multiturn_envs.server import protocol as p
from multiturn_envs.server.process import ServerProcess
from multiturn_envs.server.remote_env import ws_url

PROBE = "multiturn_envs.testing.probe:MTTest/Probe-v0"
OTHER = "127.0.0.2"  # another client address on this machine


class Client:
    """One OpenEnv WebSocket session, optionally from another source address."""

    def __init__(self, url: str, source: str | None = None) -> None:
        sock = None
        if source is not None:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            sock = socket.create_connection((host, int(port)), 10, source_address=(source, 0))
        self.ws = connect(ws_url(url), sock=sock, max_size=None, open_timeout=20).__enter__()

    def send(self, frame: Any, timeout: float = 30.0) -> dict[str, Any]:
        self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))
        return dict(json.loads(self.ws.recv(timeout=timeout)))

    def reset(self, secret: int = 7) -> dict[str, Any]:
        return self.send({"type": "reset", "data": {"seed": 0, "task_id": f"secret-{secret}"}})

    def step(self, text: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.send({"type": "step", "data": {"text": text}}, timeout)

    def close(self) -> None:
        self.ws.close()


def code_of(reply: dict[str, Any]) -> str:
    assert reply["type"] == "error", reply
    return str(reply["data"]["code"])


def stats(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/stats", timeout=10).json())


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``predicate`` held (fails after ``timeout``)."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - start


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def dead(pid: int) -> bool:
    return not alive(pid)


def server(*args: str) -> ServerProcess:
    return ServerProcess(PROBE, args=list(args), stop_timeout_s=30)


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """One server for the frame tests: 2 s per request, 64 KiB per message, depth 32."""
    with server(
        "--request-timeout", "2", "--close-timeout", "1", "--max-request-bytes", "65536"
    ) as url:
        yield url


# ------------------------------------------------------------------------------ env work
def test_request_timeout_a_gil_holding_step_is_stopped_and_freezes_no_one() -> None:
    """request_timeout_s / close_timeout_s: a step spinning in C with the GIL held (the
    REGEXP attack) must not stall other clients, /health or the timeout itself; the client
    gets TIMEOUT, the worker is killed and its slot is free again."""
    with server(
        "--request-timeout",
        "2",
        "--close-timeout",
        "1",
        "--max-sessions",
        "2",
        "--max-sessions-per-client",
        "2",
        "--pool-workers",
        "2",
    ) as url:  # fmt: skip  (a worker each: a neighbour on the spinner's worker is frozen
        spinner, other = Client(url), Client(url)  # until it is moved, test_server_pool.py)
        spinner.reset()
        other.reset()
        pid = int(spinner.step("pid")["data"]["observation"]["text"])
        start = time.monotonic()
        spinner.ws.send(json.dumps({"type": "step", "data": {"text": "regex 40"}}))
        time.sleep(0.2)  # the worker is spinning now
        slowest = 0.0
        for _ in range(10):  # everyone else is served as usual meanwhile
            t0 = time.monotonic()
            assert other.reset()["type"] == "observation"
            assert other.step("guess 1")["type"] == "observation"
            assert httpx.get(f"{url}/health", timeout=10).status_code == 200
            slowest = max(slowest, time.monotonic() - t0)
        assert slowest < 1.5, f"another client waited {slowest:.2f} s"
        reply = json.loads(spinner.ws.recv(timeout=30))
        waited = time.monotonic() - start
        assert code_of(reply) == p.TIMEOUT and "stopped" in reply["data"]["message"]
        assert 1.9 < waited < 10, waited
        wait_until(lambda: not alive(pid), 10, "the spinning worker to be killed")
        wait_until(lambda: stats(url)["closing_sessions"] == 0, 10, "the slot to be freed")
        third = Client(url)  # the freed slot serves a new session
        assert third.reset()["type"] == "observation"
        assert stats(url)["sessions_timed_out"] == 1
        for c in (other, third):
            c.close()


def test_request_timeout_a_queued_request_never_gets_the_late_reply_of_another() -> None:
    """request_timeout_s with two requests in flight on one HTTP session: the first times
    out; the second, queued behind it, gets an error, never the first one's late answer."""
    import threading

    # the slow step must be in flight before the queued one arrives: a wide margin (1 s before
    # sending it, 2 s before the timeout) so that a loaded machine does not swap their order
    with server("--request-timeout", "2", "--close-timeout", "1") as url:
        sid = httpx.post(f"{url}/sessions", timeout=30).json()["session_id"]
        reset = {"seed": 0, "task_id": "secret-7"}
        assert httpx.post(f"{url}/sessions/{sid}/reset", json=reset, timeout=30).is_success
        answers: dict[str, httpx.Response] = {}

        def step(name: str, text: str) -> None:
            body = {"action": {"text": text}}
            answers[name] = httpx.post(f"{url}/sessions/{sid}/step", json=body, timeout=30)

        slow = threading.Thread(target=step, args=("slow", "sleep 4"))
        slow.start()
        time.sleep(1.0)
        queued = threading.Thread(target=step, args=("queued", "guess 7"))
        queued.start()
        slow.join(30)
        queued.join(30)
        assert answers["slow"].json()["code"] == p.TIMEOUT
        assert answers["queued"].status_code != 200, answers["queued"].text
        assert answers["queued"].json()["code"] in (p.TIMEOUT, p.EXECUTION_ERROR, p.SESSION_ERROR)


def test_crash_a_segfault_or_an_exit_closes_only_that_session() -> None:
    """An env process that dies (SIGSEGV, as SQLite calling through an agent-chosen pointer;
    os._exit) gives EXECUTION_ERROR naming the cause; the server and other sessions live."""
    with server() as url:
        keeper = Client(url)
        keeper.reset(3)
        for action, cause in (("segv", "SIGSEGV"), ("exit", "exited with status 7")):
            victim = Client(url)
            victim.reset()
            reply = victim.step(action)
            assert code_of(reply) == p.EXECUTION_ERROR and cause in reply["data"]["message"]
            victim.close()
        raised = Client(url)
        raised.reset()
        reply = raised.step("crash")
        assert code_of(reply) == p.EXECUTION_ERROR and "RuntimeError" in reply["data"]["message"]
        assert keeper.step("guess 3")["data"]["done"] is True  # the keeper's episode went on
        assert stats(url)["sessions_crashed"] == 3
        keeper.close()


def test_worker_memory_bytes_a_hog_hits_its_own_limit() -> None:
    """worker_memory_bytes: an env allocating past its process's address-space limit gets
    MemoryError (its session closes); the server's memory does not move."""
    with server("--worker-memory-mb", "1024") as url:
        c = Client(url)
        c.reset()
        assert c.step("hog 64")["type"] == "observation"  # within the limit: fine
        reply = c.step("hog 2048")
        assert code_of(reply) == p.EXECUTION_ERROR and "MemoryError" in reply["data"]["message"]
        assert Client(url).reset()["type"] == "observation"


def test_sigterm_and_sigkill_leave_no_worker_behind() -> None:
    """SIGTERM stops a server whose env is spinning (the event loop is free, the worker is
    killed); SIGKILL of the server takes its workers with it (PR_SET_PDEATHSIG)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = server("--request-timeout", "600", "--close-timeout", "1", "--shutdown-timeout", "1")
        url = proc.start()
        try:
            c = Client(url)
            c.reset()
            pid = int(c.step("pid")["data"]["observation"]["text"])
            c.ws.send(json.dumps({"type": "step", "data": {"text": "regex 40"}}))
            time.sleep(0.3)
            assert proc.proc is not None
            start = time.monotonic()
            proc.proc.send_signal(sig)
            proc.proc.wait(30)
            if sig == signal.SIGTERM:  # shutdown_timeout_s, then the worker is stopped
                assert time.monotonic() - start < 10
            wait_until(functools.partial(dead, pid), 15, f"the worker to die after {sig.name}")
        finally:
            proc.stop()


# ------------------------------------------------------------------------------ connections
def test_handshake_timeout_idle_sockets_lock_no_one_out() -> None:
    """max_connections / max_connections_per_client / handshake_timeout_s: 70 idle TCP
    sockets (from another client, then from the same address) never make the server answer
    503 or refuse a real request; the server closes them after the handshake timeout."""
    with server(
        "--max-sessions", "16", "--max-connections", "64", "--max-connections-per-client",
        "32", "--handshake-timeout", "2",
    ) as url:  # fmt: skip
        host, port = url.removeprefix("http://").rsplit(":", 1)
        for source in (OTHER, "127.0.0.1"):
            idle = [
                socket.create_connection((host, int(port)), 10, source_address=(source, 0))
                for _ in range(70)
            ]
            time.sleep(0.3)
            for _ in range(3):
                assert httpx.get(f"{url}/health", timeout=10).status_code == 200
            c = Client(url)
            assert c.reset()["type"] == "observation"
            c.close()
            start = time.monotonic()
            for sock in idle:  # each is closed by the server: EOF or a reset
                sock.settimeout(15)
                with contextlib.suppress(ConnectionResetError):
                    assert sock.recv(1) == b""
                sock.close()
            assert time.monotonic() - start < 15
        numbers = stats(url)
        assert numbers["http_connections_evicted"] + numbers["http_connections_timed_out"] >= 70


def test_handshake_timeout_slow_headers_and_slow_bodies_are_cut() -> None:
    """handshake_timeout_s: headers sent a byte at a time (slowloris) are cut; a body that
    stalls gets 504 TIMEOUT."""
    with server("--handshake-timeout", "1.5") as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        slow = socket.create_connection((host, int(port)), 10)
        start = time.monotonic()
        closed = False
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40:
            try:
                slow.send(bytes([byte]))
                time.sleep(0.25)
            except OSError:
                closed = True
                break
        if not closed:
            slow.settimeout(5)
            assert slow.recv(1) == b""
        assert time.monotonic() - start < 8
        slow.close()
        body = socket.create_connection((host, int(port)), 10)
        body.sendall(
            b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"a": '
        )
        body.settimeout(10)
        answer = b""
        while b"TIMEOUT" not in answer:  # the headers and the body may come apart
            chunk = body.recv(4096)
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 504") and b"TIMEOUT" in answer, answer
        body.close()
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_max_sessions_per_client_one_client_cannot_take_every_slot() -> None:
    """max_sessions_per_client: a client at its share gets CLIENT_LIMIT, another client is
    still served; max_sessions: past it, CAPACITY_REACHED."""
    with server("--max-sessions", "4", "--max-sessions-per-client", "2") as url:
        greedy = [Client(url, OTHER) for _ in range(2)]
        for g in greedy:
            assert g.reset()["type"] == "observation"
        refused = Client(url, OTHER)
        assert code_of(json.loads(refused.ws.recv(timeout=10))) == p.CLIENT_LIMIT
        r = httpx.post(f"{url}/sessions", timeout=10)  # 127.0.0.1: its own share
        assert r.status_code == 201
        mine = Client(url)
        assert mine.reset()["type"] == "observation"
        full = Client(url)
        assert code_of(json.loads(full.ws.recv(timeout=10))) == p.CAPACITY_REACHED
        greedy[0].close()  # a slot frees, for a client under its share
        wait_until(lambda: stats(url)["active_sessions"] == 3, 10, "the close")
        assert code_of(json.loads(Client(url).ws.recv(timeout=10))) == p.CLIENT_LIMIT
        assert Client(url, OTHER).reset()["type"] == "observation"


def test_idle_timeout_silent_sessions_free_their_slots() -> None:
    """idle_timeout_s: sessions whose clients went silent (or vanished without a close
    frame) are closed and their slots reused, without a restart."""
    # 4 s, not 1: on a loaded 2-core machine two resets (each starts a worker process) and a
    # connect took over a second, so the first session was reaped before the probe came.
    with server(
        "--max-sessions", "2", "--max-sessions-per-client", "2", "--idle-timeout", "4"
    ) as url:
        silent, vanished = Client(url), Client(url)
        vanished.reset()
        silent.reset()
        assert code_of(json.loads(Client(url).ws.recv(timeout=10))) == p.CAPACITY_REACHED
        vanished.ws.socket.close()  # no close frame: the client process died, say
        wait_until(lambda: stats(url)["active_sessions"] == 0, 20, "both sessions to go")
        assert stats(url)["sessions_reaped"] >= 1  # the silent one
        assert Client(url).reset()["type"] == "observation"


# ------------------------------------------------------------------------------ frames
HOSTILE_FRAMES: list[tuple[str, Any, str]] = [
    (
        "depth 33 (max_json_depth)",
        '{"type": "step", "data": ' + "[" * 33 + "]" * 33 + "}",
        p.INVALID_JSON,
    ),
    ("depth 100,000 (max_json_depth)", "[" * 60_000, p.INVALID_JSON),
    ("over max_request_bytes", {"type": "step", "data": {"text": "x" * 70_000}}, p.TOO_LARGE),
    ("not JSON", "{oops", p.INVALID_JSON),
    ("JSON but not an object", "[1, 2]", p.INVALID_JSON),
    ("binary garbage", b"\xff\xfe\x00garbage", p.INVALID_JSON),
    (
        "a 5,000-digit int",
        '{"type": "reset", "data": {"seed": ' + "9" * 5000 + "}}",
        p.INVALID_JSON,
    ),
    ("unknown type", {"type": "teleport"}, p.UNKNOWN_TYPE),
    ("type of the wrong type", {"type": [1], "data": {}}, p.UNKNOWN_TYPE),
    ("step without data", {"type": "step"}, p.VALIDATION_ERROR),
    ("step data a list", {"type": "step", "data": ["guess 1"]}, p.VALIDATION_ERROR),
    ("text an int", {"type": "step", "data": {"text": 7}}, p.VALIDATION_ERROR),
    ("text null", {"type": "step", "data": {"text": None}}, p.VALIDATION_ERROR),
    (
        "extra action field",
        {"type": "step", "data": {"text": "x", "cmd": "rm"}},
        p.VALIDATION_ERROR,
    ),
    (
        "metadata a string",
        {"type": "step", "data": {"text": "x", "metadata": "m"}},
        p.VALIDATION_ERROR,
    ),
    ("reset data a string", {"type": "reset", "data": "x"}, p.VALIDATION_ERROR),
    ("seed negative", {"type": "reset", "data": {"seed": -1}}, p.VALIDATION_ERROR),
    ("seed a string", {"type": "reset", "data": {"seed": "0"}}, p.VALIDATION_ERROR),
    ("seed NaN", '{"type": "reset", "data": {"seed": NaN}}', p.VALIDATION_ERROR),
    ("max_turns zero", {"type": "reset", "data": {"max_turns": 0}}, p.VALIDATION_ERROR),
    ("max_turns a string", {"type": "reset", "data": {"max_turns": "8"}}, p.VALIDATION_ERROR),
    (
        "max_turns Infinity",
        '{"type": "reset", "data": {"max_turns": Infinity}}',
        p.VALIDATION_ERROR,
    ),
    (
        "budget_mode unknown",
        {"type": "reset", "data": {"budget_mode": "secret"}},
        p.VALIDATION_ERROR,
    ),
    ("task_id unknown", {"type": "reset", "data": {"task_id": "nope"}}, p.VALIDATION_ERROR),
    ("task_id an object", {"type": "reset", "data": {"task_id": {"a": 1}}}, p.VALIDATION_ERROR),
    ("options a list", {"type": "reset", "data": {"options": [1]}}, p.VALIDATION_ERROR),
    (
        "episode_id too long",
        {"type": "reset", "data": {"episode_id": "e" * 300}},
        p.VALIDATION_ERROR,
    ),
]


def tool_call(name: Any, arguments: Any) -> dict[str, Any]:
    return {
        "type": "step",
        "data": {"type": "call_tool", "tool_name": name, "arguments": arguments},
    }


RNG = {"bit_generator": "PCG64", "state": {"state": 1, "inc": 1}, "has_uint32": 0, "uinteger": 0}


def draw(tool: str = "random_action", **changes: Any) -> dict[str, Any]:
    """A draw with the valid PCG64 state above, some of its fields changed."""
    return tool_call(tool, {"rng_state": {**RNG, **changes}})


HOSTILE_TOOLS: list[tuple[str, Any, str]] = [
    ("unknown tool", tool_call("rm -rf", {}), "tool_not_found"),
    ("tool_name an int", tool_call(5, {}), "invalid_args"),
    ("arguments a list", tool_call("describe", [1]), "invalid_args"),
    ("missing argument", tool_call("restore", {}), "invalid_args"),
    ("extra argument", tool_call("describe", {"x": 1}), "invalid_args"),
    ("argument of the wrong type", tool_call("score_action", {"action": 5}), "invalid_args"),
    ("unknown snapshot", tool_call("restore", {"snapshot_id": "nope"}), "invalid_args"),
    ("rng_state of MT19937", draw(bit_generator="MT19937"), "invalid_args"),
    ("rng_state 10**200", draw(state={"state": 10**200, "inc": 1}), "invalid_args"),
    ("rng_state negative inc", draw(state={"state": 1, "inc": -1}), "invalid_args"),
    ("rng_state has_uint32 2**70", draw(has_uint32=2**70), "invalid_args"),
    ("rng_state uinteger -1", draw("error_action", uinteger=-1), "invalid_args"),
    ("rng_state a float", draw(state={"state": 1.5, "inc": 1}), "invalid_args"),
    ("rng_state strings", draw(state={"state": "x", "inc": "y"}), "invalid_args"),
    ("rng_state a list", tool_call("random_action", {"rng_state": [1, 2]}), "invalid_args"),
    ("rng_state missing keys", tool_call("random_action", {"rng_state": {}}), "invalid_args"),
]


@pytest.fixture
def episode(served: str) -> Iterator[Client]:
    """A session midway through an episode (one wrong guess played)."""
    c = Client(served)
    c.reset(9)
    assert c.step("guess 2")["data"]["metadata"]["turn"] == 1
    yield c
    c.close()


def assert_episode_goes_on(c: Client) -> None:
    """The episode is where it was: turn 1, and the next step is turn 2."""
    state = c.send({"type": "state"})
    assert state["type"] == "state" and state["data"]["turn"] == 1, state
    assert c.step("guess 9")["data"]["metadata"]["turn"] == 2


@pytest.mark.parametrize(
    ("name", "frame", "code"), HOSTILE_FRAMES, ids=[f[0] for f in HOSTILE_FRAMES]
)
def test_max_request_bytes_and_max_json_depth_malformed_frames_get_an_error_frame(
    episode: Client, name: str, frame: Any, code: str
) -> None:
    """Every malformed frame gets one error frame with its code; the episode goes on (a
    reset that is refused leaves the episode as it was)."""
    assert code_of(episode.send(frame)) == code, name
    assert_episode_goes_on(episode)


@pytest.mark.parametrize(
    ("name", "frame", "kind"), HOSTILE_TOOLS, ids=[f[0] for f in HOSTILE_TOOLS]
)
def test_malformed_tool_calls_and_rng_states_fail_the_call_not_the_episode(
    episode: Client, name: str, frame: Any, kind: str
) -> None:
    reply = episode.send(frame)
    assert reply["type"] == "observation", reply
    assert reply["data"]["observation"]["error"]["error_type"] == kind, name
    assert_episode_goes_on(episode)


def test_frames_over_four_times_max_request_bytes_close_the_socket_with_1009(served: str) -> None:
    """Above 4 x max_request_bytes the WebSocket layer refuses the message itself (close code
    1009, message too big) before the app could read it; the server goes on."""
    c = Client(served)
    c.reset()
    with pytest.raises(Exception, match="1009"):
        c.send({"type": "step", "data": {"text": "x" * (5 * 65536)}})
    assert Client(served).reset()["type"] == "observation"


def test_max_reply_bytes_an_oversized_tool_result_is_refused_and_the_session_lives() -> None:
    """max_reply_bytes: a tool whose result is over the limit fails (an execution_error); the
    session and its episode go on."""
    with server("--max-reply-bytes", "65536", "--max-observation-chars", "60000") as url:
        c = Client(url)
        c.reset()
        for _ in range(2):
            assert c.step("big 50000")["type"] == "observation"
        reply = c.send(tool_call("messages", {}))
        assert reply["data"]["observation"]["error"]["error_type"] == "execution_error"
        assert "over the limit" in reply["data"]["observation"]["error"]["message"]
        assert c.step("guess 7")["data"]["done"] is True


def test_http_routes_answer_malformed_bodies_with_codes(served: str) -> None:
    http = httpx.Client(base_url=served, timeout=10)
    sid = http.post("/sessions").json()["session_id"]
    assert http.post(f"/sessions/{sid}/reset", json={"seed": 0, "task_id": "secret-4"}).is_success
    for body, status, code in [
        (b"[" * 40_000, 400, p.INVALID_JSON),
        (b'{"action": ' + b"[" * 40 + b"]" * 40 + b"}", 400, p.INVALID_JSON),
        (b"x" * 70_000, 413, p.TOO_LARGE),
        (b'{"action": {"text": 5}}', 422, p.VALIDATION_ERROR),
        (b'{"nope": 1}', 422, p.VALIDATION_ERROR),
    ]:
        r = http.post(f"/sessions/{sid}/step", content=body)
        assert (r.status_code, r.json()["code"]) == (status, code), body[:40]
    rpc = http.post("/mcp", content=b'{"jsonrpc": "2.0", "id": ' + b"[" * 50 + b"]" * 50 + b"}")
    assert rpc.json()["error"]["data"]["code"] == p.INVALID_JSON
    rpc = http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"session_id": sid, "name": "expert_action", "arguments": {}}},
    )  # fmt: skip
    assert rpc.json()["result"]["data"] == "guess 7"
    r = http.post(f"/sessions/{sid}/step", json={"action": {"text": "guess 4"}})
    assert r.json()["done"] is True  # the episode went on through all of it
    http.close()


# ------------------------------------------------------------------------------ generated
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=16,
)
FIELDS = st.sampled_from(
    ["seed", "task_id", "max_turns", "budget_mode", "options", "episode_id", "text",
     "metadata", "type", "tool_name", "arguments", "rng_state", "expert_in_metadata"]
)  # fmt: skip


@st.composite
def rng_states(draw: st.DrawFn) -> Any:
    """A client's PCG64 state with one part broken: a field of any JSON type or a huge int,
    a field dropped, or one added."""
    state: dict[str, Any] = json.loads(json.dumps(RNG))
    where = draw(st.sampled_from(["bit_generator", "state", "has_uint32", "uinteger", "inner"]))
    value = draw(JSON_VALUES | st.integers(-(2**200), 2**200))
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    target = state["state"] if where == "inner" else state
    key = draw(st.sampled_from(["state", "inc"])) if where == "inner" else where
    if action == "replace":
        target[key] = value
    elif action == "drop":
        del target[key]
    else:
        target[draw(st.text(max_size=6))] = value
    return state


@st.composite
def malformed_frames(draw: st.DrawFn) -> str | bytes:
    """Frames a broken or hostile client sends: near-valid frames with fields of any type,
    tool calls with broken arguments (rng_state above all), random JSON, deep nesting, raw
    bytes."""
    kind = draw(st.sampled_from(["reset", "step", "state", "close?", "tool", "junk"]))
    if kind == "junk":
        return draw(
            st.binary(max_size=200)
            | st.text(max_size=200)
            | st.integers(30, 3000).map(lambda n: "[" * n + "]" * n)
            | JSON_VALUES.map(json.dumps)
        )
    data: Any = draw(st.dictionaries(FIELDS, JSON_VALUES, max_size=4) | JSON_VALUES)
    if kind == "tool":
        name = draw(st.sampled_from(["random_action", "error_action", "restore", "score_action",
                                     "snapshot", "play_prefix", "nope"]))  # fmt: skip
        arguments = draw(
            st.dictionaries(st.sampled_from(["rng_state", "action", "snapshot_id"]), JSON_VALUES)
            | rng_states().map(lambda state: {"rng_state": state})
        )
        data = {"type": "call_tool", "tool_name": name, "arguments": arguments}
        kind = "step"
    if kind == "close?":
        kind = draw(st.text(max_size=8))
    return json.dumps({"type": kind, "data": data})


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=malformed_frames())
def test_generated_malformed_frames_get_one_reply_and_never_end_the_session(
    served: str, frame: str | bytes
) -> None:
    """Whatever a client sends, it gets exactly one frame back (an error, or the result of a
    valid request) and its session stays usable: no malformed frame is ever an env crash."""
    c = Client(served)
    try:
        c.reset()
        if frame == '{"type": "close", "data": {}}' or '"type": "close"' in str(frame):
            return  # a close frame ends the session by design
        reply = c.send(frame)
        assert reply["type"] in ("error", "observation", "state"), reply
        if reply["type"] == "error":
            assert reply["data"]["code"] not in (p.EXECUTION_ERROR, p.SESSION_ERROR), reply
        assert c.send({"type": "state"})["type"] == "state"
    finally:
        c.close()


@pytest.fixture(scope="module")
def live_episode(served: str) -> Iterator[Client]:
    """One session midway through an episode, shared by the generated examples."""
    c = Client(served)
    c.reset(9)
    c.step("guess 2")
    yield c
    c.close()


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=rng_states(), tool=st.sampled_from(["random_action", "error_action"]))
def test_generated_rng_states_fail_the_tool_call_not_the_episode(
    live_episode: Client, state: Any, tool: str
) -> None:
    """A client's rng_state with any field broken is either a state numpy takes (the draw
    happens) or an invalid_args tool error; never an env crash that loses the episode."""
    reply = live_episode.send(tool_call(tool, {"rng_state": state}))
    assert reply["type"] == "observation", reply
    observation = reply["data"]["observation"]
    if observation["error"] is not None:
        assert observation["error"]["error_type"] == "invalid_args", observation
    else:
        assert isinstance(observation["result"]["data"]["action"], str)
    state_now = live_episode.send({"type": "state"})
    assert state_now["type"] == "state" and state_now["data"]["turn"] == 1


@pytest.mark.parametrize(
    "reply",
    [
        "[" * 100_000,
        "not json",
        "[1, 2]",
        '{"type": "observation", "data": [1]}',
        '{"type": "observation", "data": {"observation": "text"}}',
        '{"type": "observation", "data": {"observation": {"error": 5}}}',
        '{"type": "observation", "data": {"observation": {"result": [1]}}}',
    ],
)
def test_the_remote_client_turns_a_broken_server_into_remote_env_errors(reply: str) -> None:
    """The other end of the wire: a server (or a proxy) that answers garbage gives the
    harness a RemoteEnvError, never a RecursionError, AttributeError or a hang."""
    import threading

    from websockets.sync.server import serve

    from multiturn_envs.server.remote_env import RemoteEnvError, open_remote_env

    def answer(ws: Any) -> None:
        with contextlib.suppress(Exception):
            ws.recv(timeout=10)
            ws.send(reply)
            ws.recv(timeout=10)

    with serve(answer, "127.0.0.1", 0) as fake:
        thread = threading.Thread(target=fake.serve_forever, daemon=True)
        thread.start()
        port = fake.socket.getsockname()[1]
        with pytest.raises(RemoteEnvError, match="malformed"):
            open_remote_env(f"http://127.0.0.1:{port}", timeout_s=10)
        fake.shutdown()
        thread.join(10)
