"""The remote env client against a server that answers anything (issue 29): every reply a
broken server or proxy may send, at every call the harness makes (``describe``, reset, step,
the tools listing, each oracle hook), is either read or refused with one
:class:`RemoteEnvError` naming what is malformed; never a ``TypeError``, ``AttributeError``,
``KeyError``, ``OverflowError`` or ``RecursionError`` deep in a run.

A real WebSocket server on loopback answers ``describe`` soundly and the call under test with
the reply the test gives.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multiturn_envs.errors import EpisodeOver
from multiturn_envs.server.remote_env import RemoteEnvError, RemoteTextEnv, open_remote_env

DESCRIBE = {
    "env_id": "MT/FrozenLake-v0",
    "env_class": "FrozenLakeTextEnv",
    "spec": None,
    "overrides_random_action": False,
    "default_max_turns": 4,
    "default_budget_mode": "hidden",
    "max_tool_calls": 1,
    "tools_change_in_episode": False,
    "reply_without_call": "stop",
}
INFO = {"task_id": "4x4", "turn": 0, "success": False, "step_score": None, "state_key": "k"}
GOOD = {"observation": {"text": "start", "metadata": INFO}, "reward": None, "done": False}


def tool_reply(data: Any) -> str:
    observation = {"tool_name": "x", "result": {"data": data}, "error": None}
    return json.dumps({"type": "observation", "data": {"observation": observation}})


class Fake:
    """The server: ``describe`` as ``description``, then ``answer(frame)`` for each frame."""

    def __init__(self) -> None:
        self.description: Any = DESCRIBE
        self.answer: Callable[[dict[str, Any]], str] = lambda frame: json.dumps(
            {"type": "observation", "data": GOOD}
        )

    def handle(self, ws: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                frame = json.loads(ws.recv(timeout=30))
                if frame.get("type") == "close":
                    return
                data = frame.get("data") or {}
                if isinstance(data, dict) and data.get("tool_name") == "describe":
                    ws.send(tool_reply(self.description))
                else:
                    ws.send(self.answer(frame))


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[str, Fake]]:
    from websockets.sync.server import serve

    script = Fake()
    with serve(script.handle, "127.0.0.1", 0, max_size=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}", script
        server.shutdown()
        thread.join(10)


@pytest.fixture
def script(fake: tuple[str, Fake]) -> Iterator[tuple[str, Fake]]:
    url, script = fake
    yield url, script
    script.description = DESCRIBE
    script.answer = Fake().answer


ALLOWED = (RemoteEnvError, EpisodeOver, ResetNeeded)


def _clean(call: Callable[[], Any]) -> None:
    """``call`` either works or raises what the contract allows (a tool error is ``ValueError``
    with its message, as a local hook's refusal)."""
    try:
        call()
    except ALLOWED:
        pass
    except ValueError as exc:
        assert str(exc).startswith("tool "), repr(exc)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("default_max_turns", "4"),
        ("default_max_turns", -1),
        ("default_budget_mode", ["hidden"]),
        ("spec", 5),
        ("spec", "{not json"),
        ("max_tool_calls", [1]),
        ("max_tool_calls", 10**30),
        ("env_id", {"a": 1}),
    ],
)
def test_a_malformed_describe_is_refused(script: tuple[str, Fake], field: str, value: Any) -> None:
    url, fake = script
    fake.description = {**DESCRIBE, field: value}
    with pytest.raises(RemoteEnvError, match="malformed"):
        open_remote_env(url, timeout_s=10).close()


def test_a_describe_that_is_not_an_object_is_refused(script: tuple[str, Fake]) -> None:
    url, fake = script
    for value in ("text", [1], 5, None):
        fake.description = value
        with pytest.raises(RemoteEnvError, match="malformed"):
            open_remote_env(url, timeout_s=10).close()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["4x4", "guess 1", "PCG64", "bad name"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(
        st.sampled_from(
            ["observation", "text", "metadata", "reward", "turn", "step_score", "success",
             "tools", "name", "input_schema", "description", "result", "data", "error",
             "message", "action", "rng_state", "snapshot_id", "info", "terminated", "x"]
        ),
        inner,
        max_size=4,
    ),
    max_leaves=12,
)  # fmt: skip

CALLS: dict[str, Callable[[RemoteTextEnv], Any]] = {
    "reset": lambda env: env.reset(seed=0, options={"task_id": "4x4"}),
    "step": lambda env: env.step("<answer>left</answer>"),
    "tools": lambda env: env.tools(),
    "task_ids": lambda env: env.task_ids(),
    "system_prompt": lambda env: env.system_prompt(),
    "valid_actions": lambda env: env.valid_actions(),
    "expert_action": lambda env: env.expert_action(),
    "score_action": lambda env: env.score_action("x"),
    "play_prefix": lambda env: env.play_prefix("x"),
    "get_state": lambda env: env.get_state(),
    "error_action": lambda env: env.error_action(np.random.default_rng(0)),
}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    call=st.sampled_from(sorted(CALLS)),
    value=json_values,
    wrap=st.sampled_from(["data", "observation", "tool", "metadata"]),
)
def test_any_reply_to_any_call_is_read_or_one_remote_env_error(
    script: tuple[str, Fake], call: str, value: Any, wrap: str
) -> None:
    """Bound: a reply of any JSON shape, as the frame's data, the observation, a tool's
    result or the ``info``, to any call the harness makes."""
    url, fake = script
    if wrap == "data":
        reply = {"type": "observation", "data": value}
    elif wrap == "observation":
        reply = {"type": "observation", "data": {"observation": value, "reward": value}}
    elif wrap == "metadata":
        reply = {"type": "observation", "data": {"observation": {"text": "t", "metadata": value}}}
    else:
        reply = json.loads(tool_reply(value))
    fake.answer = lambda frame: json.dumps(reply)
    env = open_remote_env(url, timeout_s=10)
    try:
        env._needs_reset = False  # the local guard would refuse a step before a reset
        _clean(lambda: CALLS[call](env))
    finally:
        env.close()


def test_a_deep_reply_is_refused_before_it_is_parsed(script: tuple[str, Fake]) -> None:
    """Bound: ``MAX_REPLY_DEPTH`` (64 levels) on every reply, so nothing the harness keeps of
    one (a deep copy, a pickle, a record) comes near the recursion limit."""
    url, fake = script
    deep = '{"a": ' * 65 + "1" + "}" * 65
    fake.answer = lambda frame: (
        '{"type": "observation", "data": {"observation": {"text": "t", "metadata": ' + deep + "}}}"
    )
    env = open_remote_env(url, timeout_s=10)
    try:
        with pytest.raises(RemoteEnvError, match="nested"):
            env.reset(seed=0)
    finally:
        env.close()
