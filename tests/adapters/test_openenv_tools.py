"""The served env's own tools over OpenEnv's MCP shapes: ``call_tool`` step actions and current
OpenEnv's ``{"type": "mcp"}`` JSON-RPC frames on ``/ws`` (a call of an env tool is a turn, with
the per-step reward of the session's reward), ``list_tools`` listing the env's tools only, and
the HTTP ``/mcp`` endpoint. The server is a real uvicorn server on 127.0.0.1 (in a thread)."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import httpx
import pytest
from test_openenv_server import thread_server
from websockets.sync.client import connect

import multiturn_envs  # noqa: F401
from multiturn_envs.rewards import make_reward
from multiturn_envs.rewards.base import Episode, Turn
from multiturn_envs.server.app import create_app
from multiturn_envs.server.remote_env import open_remote_env, ws_url
from multiturn_envs.tools import ToolCall


class Socket:
    def __init__(self, url: str) -> None:
        self.ws = connect(ws_url(url), max_size=None).__enter__()

    def send(self, frame: dict[str, Any]) -> dict[str, Any]:
        self.ws.send(json.dumps(frame))
        return dict(json.loads(self.ws.recv(timeout=60)))

    def rpc(self, method: str, params: dict[str, Any], rid: Any = 1) -> dict[str, Any]:
        reply = self.send(
            {
                "type": "mcp",
                "data": {"jsonrpc": "2.0", "method": method, "params": params, "id": rid},
            }
        )
        assert reply["type"] == "mcp"
        return dict(reply["data"])


@pytest.fixture(scope="module")
def lake() -> Any:
    app = create_app("MT/FrozenLake-v0", {"max_turns": 6, "is_slippery": False})
    with thread_server(app) as url:
        yield url


def test_list_tools_lists_the_env_tools_and_a_call_is_a_turn(lake: str) -> None:
    s = Socket(lake)
    s.send({"type": "reset", "data": {"seed": 0, "task_id": "4x4", "reward": "process"}})
    listed = s.send({"type": "step", "data": {"type": "list_tools"}})
    tools = listed["data"]["observation"]["tools"]
    assert [t["name"] for t in tools] == ["move"]  # no oracle hook is offered to an agent
    assert tools[0]["input_schema"]["properties"]["direction"]["enum"] == [
        "Left",
        "Down",
        "Right",
        "Up",
    ]
    twin = gym.make("MT/FrozenLake-v0", max_turns=6, is_slippery=False, disable_env_checker=True)
    _, start = twin.reset(seed=0, options={"task_id": "4x4"})
    reward = make_reward("process")
    tally = reward.tally(start)
    turns = []
    for move in ("Down", "Down", "Right"):
        got = s.send(
            {
                "type": "step",
                "data": {
                    "type": "call_tool",
                    "tool_name": "move",
                    "arguments": {"direction": move},
                },
            }
        )["data"]
        obs, r, term, trunc, info = twin.step(ToolCall("move", {"direction": move}))
        turn = Turn(float(r), info, term, trunc)
        turns.append(turn)
        observation = got["observation"]
        assert observation["tool_name"] == "move" and observation["error"] is None
        assert observation["result"] == {"data": obs} and observation["text"] == obs
        assert got["reward"] == pytest.approx(tally.add(turn))  # the per-step credit
        assert got["metadata"]["step_score"] == info["step_score"]
    assert reward.score(Episode(start, tuple(turns))) == pytest.approx(tally.score)
    # hooks are callable by name, not listed, and never a turn
    state = s.send({"type": "state"})["data"]
    expert = s.send({"type": "step", "data": {"type": "call_tool", "tool_name": "expert_action"}})[
        "data"
    ]["observation"]["result"]["data"]
    assert isinstance(expert, str) and s.send({"type": "state"})["data"] == state


def test_mcp_frames_on_the_socket(lake: str) -> None:
    s = Socket(lake)
    listed = s.rpc("tools/list", {}, rid="a")  # before a reset: FrozenLake's are fixed
    assert listed["id"] == "a" and [t["name"] for t in listed["result"]["tools"]] == ["move"]
    s.send({"type": "reset", "data": {"seed": 1, "task_id": "4x4", "max_turns": 2}})
    listed = s.rpc("tools/list", {})
    assert [t["name"] for t in listed["result"]["tools"]] == ["move"]
    first = s.rpc("tools/call", {"name": "move", "arguments": {"direction": "Up"}}, rid=7)
    result = first["result"]
    assert first["id"] == 7 and result["tool_name"] == "move" and not result["done"]
    assert result["metadata"]["turn"] == 1 and "text" in result
    bad = s.rpc("tools/call", {"name": "move", "arguments": {"direction": "Sideways"}})
    assert "must be one of" in bad["result"]["text"]  # a malformed call is a turn, explained
    assert bad["result"]["metadata"]["parse_error"] and bad["result"]["done"]  # budget 2 spent
    over = s.rpc("tools/call", {"name": "move", "arguments": {"direction": "Up"}})
    assert "EPISODE_OVER" in json.dumps(over["error"])
    hook = s.rpc("tools/call", {"name": "task_ids", "arguments": {}})
    assert isinstance(hook["result"]["data"], list) and hook["result"]["data"]
    assert s.rpc("nope", {})["error"]["code"] == -32601
    assert (
        s.send({"type": "mcp", "data": {"method": "tools/list"}})["data"]["error"]["code"] == -32600
    )
    assert s.send({"type": "mcp", "data": [1, 2]})["data"]["error"]["code"] == -32600
    huge = s.rpc("tools/call", {"name": "move", "arguments": {"direction": "x" * 500_000}})
    assert "error" in huge  # the episode is over: refused, the socket lives on
    assert s.send({"type": "state"})["type"] == "state"


def test_http_mcp_lists_a_fresh_env_tools_and_calls_in_a_session(lake: str) -> None:
    listed = httpx.post(f"{lake}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["move"]  # a fresh env's
    session = httpx.post(
        f"{lake}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "openenv/session/create"}
    ).json()["result"]["session_id"]
    httpx.post(f"{lake}/sessions/{session}/reset", json={"seed": 0, "task_id": "4x4"})
    called = httpx.post(
        f"{lake}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"session_id": session, "name": "move", "arguments": {"direction": "Right"}},
        },
    ).json()
    assert called["result"]["metadata"]["turn"] == 1


def test_remote_env_exposes_the_served_tools(lake: str) -> None:
    env = open_remote_env(lake)
    try:
        env.reset(seed=0, options={"task_id": "4x4"})
        assert [t.name for t in env.tools()] == ["move"]
        assert env.reply_without_call == "stop" and env.max_tool_calls == 1
        obs, *_ = env.step(ToolCall("move", {"direction": "Right"}))
        assert "Right" in obs
        assert env.messages()[1]["content"].startswith("<tool_call>")
    finally:
        env.close()
