"""OpenEnv's own clients drive every registered env through ``multiturn-envs serve``, unchanged.

The clients run in OpenEnv's environment (``openenv`` 0.10 with its own dependencies, which
conflict with verifiers': scripts/setup.sh builds it in ~/.cache/multiturn-envs/openenv;
``MTE_OPENENV_PYTHON`` overrides), as a trainer on another machine would: they know nothing of
our package. The server is a real process on 127.0.0.1. Each episode is replayed in-process
on a twin env with the same seed and actions: the client must see exactly what the env said.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import multiturn_envs
from multiturn_envs.server.process import ServerProcess
from multiturn_envs.testing import require, require_docker
from multiturn_envs.tools import ToolCall

OPENENV_PYTHON = os.environ.get(
    "MTE_OPENENV_PYTHON", os.path.expanduser("~/.cache/multiturn-envs/openenv/bin/python")
)

# Runs under OPENENV_PYTHON: OpenEnv's GenericEnvClient for the episode, its MCPToolClient for
# the env's tools (a CallToolAction is a turn) and the oracle hooks, and a raw WebSocket with
# OpenEnv's own {"type": "mcp"} frame models; prints one JSON transcript.
DRIVER = r"""
import json, sys
from openenv.core import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from openenv.core.env_server.mcp_types import (
    CallToolAction, JsonRpcRequest, JsonRpcResponse, WSMCPMessage, WSMCPResponse,
)
from websockets.sync.client import connect

plan = json.load(sys.stdin)
headers = plan.get("headers")
out = {}
with GenericEnvClient(base_url=plan["url"], headers=headers, message_timeout_s=120).sync() as env:
    r = env.reset(**plan["reset"])
    steps = [{"observation": r.observation, "reward": r.reward, "done": r.done,
              "metadata": r.metadata}]
    for action in plan["actions"]:
        r = env.step({"text": action})
        steps.append({"observation": r.observation, "reward": r.reward, "done": r.done,
                      "metadata": r.metadata})
    out["steps"] = steps
    out["state"] = env.state()
    try:
        env.step({"text": "one more"})
        out["after_end"] = None
    except RuntimeError as exc:
        out["after_end"] = str(exc)
with MCPToolClient(base_url=plan["url"], headers=headers).sync() as client:
    client.reset(**plan["reset"])
    out["tools"] = [tool.model_dump() for tool in client.list_tools()]
    out["expert"] = client.call_tool("expert_action")
    out["score"] = client.call_tool("score_action", action=out["expert"])
    if plan.get("call"):
        r = client.step(CallToolAction(tool_name=plan["call"]["name"],
                                       arguments=plan["call"]["arguments"]))
        out["call"] = {"reward": r.reward, "done": r.done, "result": r.observation.result,
                       "tool_name": r.observation.tool_name,
                       "step_score": r.observation.metadata.get("step_score")}
if plan.get("call"):
    url = plan["url"].replace("http", "ws", 1) + "/ws"
    with connect(url, additional_headers=headers or {}, max_size=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": plan["reset"]}))
        json.loads(ws.recv(timeout=120))
        frames = []
        for rid, (method, params) in enumerate(
            [("tools/list", {}), ("tools/call", {"name": plan["call"]["name"],
                                                 "arguments": plan["call"]["arguments"]})]
        ):
            request = JsonRpcRequest(jsonrpc="2.0", method=method, params=params, id=rid)
            ws.send(WSMCPMessage(data=request.model_dump()).model_dump_json())
            reply = WSMCPResponse.model_validate_json(ws.recv(timeout=120))
            frames.append(JsonRpcResponse(**reply.data).model_dump())
        out["mcp_frames"] = frames
print(json.dumps(out))
"""


def run_driver(plan: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    require(Path(OPENENV_PYTHON).exists(), f"OpenEnv's client environment at {OPENENV_PYTHON}")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    done = subprocess.run(
        [OPENENV_PYTHON, str(script)],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # no multiturn_envs
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def process_tree(root: int) -> set[int]:
    """``root`` and its live descendants (the server, its fork server, its env workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


def owner_tags(root: int) -> set[str]:
    """The sandbox owner tags of ``root``'s process tree (each env worker owns its pool)."""
    from multiturn_envs.sandbox.orphans import owner_tag

    return {owner_tag(pid) for pid in process_tree(root)}


def docker_owned_by(tags: set[str]) -> int:
    """Sandbox containers whose owner is one of ``tags`` (the pool labels each with its owner)."""
    import docker

    from multiturn_envs.sandbox.orphans import LABEL, OWNER_LABEL

    client = docker.from_env()
    try:
        # sparse: no per-container inspect, which races with the pool removing containers
        found = client.containers.list(all=True, sparse=True, filters={"label": LABEL})
        return sum(1 for c in found if c.attrs.get("Labels", {}).get(OWNER_LABEL) in tags)
    finally:
        client.close()


def env_kwargs_for(env_id: str) -> dict[str, Any]:
    """DeepCoder runs on the Docker pool (skips without one; fails under CI=true)."""
    if env_id != "MT/DeepCoder-v0":
        return {}
    require_docker()
    return {"backend": "docker"}


def tool_call_of(env_id: str, base: Any, action: str) -> dict[str, Any] | None:
    """The expert's first action as one of the env's tool calls (what an agent would send)."""
    if env_id == "MT/BFCL-v0":
        from multiturn_envs.envs.bfcl.calls import decode

        calls = decode(action).calls
        return {"name": calls[0].name, "arguments": dict(calls[0].kwargs)} if calls else None
    if env_id == "MT/Terminal-v0":
        from multiturn_envs.envs.terminal.parsing import parse_action

        command = parse_action(action).command
        return (
            None if command is None else {"name": "run_command", "arguments": {"command": command}}
        )
    call = base.as_tool_call(action)
    return None if call is None else {"name": call.name, "arguments": dict(call.arguments)}


def twin_call(
    env_id: str, env_kwargs: dict[str, Any], task_id: str, seed: int, max_turns: int, call: Any
) -> tuple[str, float, bool, list[str]]:
    """The in-process env's answer to ``call`` as the first turn, and its tools' names."""
    env = gym.make(env_id, disable_env_checker=True, max_turns=max_turns, **env_kwargs)
    try:
        env.reset(seed=seed, options={"task_id": task_id})
        names = [t.name for t in env.unwrapped.tools()]
        obs, reward, terminated, truncated, _ = env.step(ToolCall(call["name"], call["arguments"]))
        return obs, float(reward), bool(terminated or truncated), names
    finally:
        env.close()


def twin_episode(
    env_id: str, env_kwargs: dict[str, Any], task_id: str, seed: int, max_turns: int
) -> tuple[list[str], list[dict[str, Any]], str]:
    """Actions (one random, then the expert's) and what the in-process env answered."""
    env = gym.make(env_id, disable_env_checker=True, max_turns=max_turns, **env_kwargs)
    base = env.unwrapped
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_id})
        expected = [{"text": obs, "reward": None, "done": False, "info": info}]
        first_expert = base.expert_action()
        rng = np.random.default_rng(seed)
        actions: list[str] = []
        done = False
        while not done:
            action = base.random_action(rng) if not actions else base.expert_action()
            actions.append(action)
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            expected.append({"text": obs, "reward": reward, "done": done, "info": info})
        return actions, expected, first_expert
    finally:
        env.close()


@pytest.mark.parametrize("env_id", multiturn_envs.env_ids())
def test_generic_env_client_drives_every_registered_env(env_id: str, tmp_path: Path) -> None:
    env_kwargs = env_kwargs_for(env_id)
    probe = gym.make(env_id, disable_env_checker=True, **env_kwargs)
    task_id = str(probe.unwrapped.task_ids()[1])
    probe.close()
    seed, max_turns = 11, 3
    actions, expected, first_expert = twin_episode(env_id, env_kwargs, task_id, seed, max_turns)
    probe = gym.make(env_id, disable_env_checker=True, **env_kwargs)
    call = tool_call_of(env_id, probe.unwrapped, first_expert)
    probe.close()
    assert call is not None, f"{env_id}: the expert's first action has no tool call"
    server = ServerProcess(env_id, env_kwargs)
    with server as url:
        plan = {
            "url": url,
            "reset": {"seed": seed, "task_id": task_id, "max_turns": max_turns},
            "actions": actions,
            "call": call,
        }
        got = run_driver(plan, tmp_path)
        assert server.proc is not None
        pid = server.proc.pid
        if env_kwargs:  # the session's submissions ran on its env process's one shared pool
            from multiturn_envs.sandbox.docker_pool import default_pool_size

            assert docker_owned_by(owner_tags(pid)) <= default_pool_size()
    assert len(got["steps"]) == len(expected)
    for step, want in zip(got["steps"], expected):
        assert step["observation"]["text"] == want["text"]
        assert step["reward"] == want["reward"]
        assert step["done"] == want["done"]
        meta = step["metadata"]
        for key in ("task_id", "turn", "turns_left", "success", "step_score", "parse_error"):
            assert meta[key] == want["info"][key], key
        reason = want["info"].get("truncation_reason")  # absent after reset
        assert step["observation"]["truncated"] == (reason is not None)
    assert got["state"]["step_count"] == len(actions)
    assert got["state"]["task_id"] == task_id and got["state"]["done"] is True
    assert got["after_end"] is not None and "EPISODE_OVER" in got["after_end"]
    assert got["expert"] == first_expert
    assert 0.0 <= got["score"] <= 1.0
    # the env's tools: listed (and only they: no oracle hook is offered to an agent), and a
    # CallToolAction / an MCP tools/call frame is the turn the in-process env takes
    text, reward, done, names = twin_call(env_id, env_kwargs, task_id, seed, max_turns, call)
    assert [t["name"] for t in got["tools"]] == names and names
    assert not {"expert_action", "score_action", "snapshot"} & set(names)
    assert got["call"]["tool_name"] == call["name"]
    assert got["call"]["result"] == {"data": text}
    assert got["call"]["reward"] == reward and got["call"]["done"] == done
    listed, called = got["mcp_frames"]
    assert [t["name"] for t in listed["result"]["tools"]] == names
    assert called["result"]["text"] == text and called["result"]["reward"] == reward


def test_a_bearer_token_is_sent_by_openenv_clients(tmp_path: Path) -> None:
    seed, task = 2, "4x4"
    actions, expected, _ = twin_episode("MT/FrozenLake-v0", {}, task, seed, 2)
    with ServerProcess("MT/FrozenLake-v0", token="s3cret") as url:
        plan = {
            "url": url,
            "headers": {"Authorization": "Bearer s3cret"},
            "reset": {"seed": seed, "task_id": task, "max_turns": 2},
            "actions": actions,
        }
        got = run_driver(plan, tmp_path)
        assert [s["observation"]["text"] for s in got["steps"]] == [e["text"] for e in expected]
        plan["headers"] = {"Authorization": "Bearer wrong"}
        script = tmp_path / "driver.py"
        done = subprocess.run(
            [OPENENV_PYTHON, str(script)],
            input=json.dumps(plan),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and "ConnectionError" in done.stderr


@pytest.mark.parametrize("pool", ["private", "shared"])
def test_abandoned_deepcoder_sessions_release_their_containers(pool: str) -> None:
    """A silent client is reaped after the idle timeout, a vanished one at once.

    Each session's env runs in a worker process of its own: with ``sandbox_pool="private"``
    its env owns containers, removed with it; with the shared pool (the default) the worker's
    pool owns them, removed when the worker exits (it runs its atexit handlers). Either way no
    container of a closed session's worker is left.
    """
    import time

    import httpx
    from websockets.sync.client import connect

    from multiturn_envs.server.remote_env import ws_url

    env_kwargs = {**env_kwargs_for("MT/DeepCoder-v0"), "sandbox_pool": pool}
    probe = gym.make("MT/DeepCoder-v0", disable_env_checker=True, **env_kwargs)
    task = str(probe.unwrapped.task_ids()[0])
    probe.reset(seed=0, options={"task_id": task})
    solution = probe.unwrapped.expert_action()
    probe.close()
    server = ServerProcess("MT/DeepCoder-v0", env_kwargs, args=["--idle-timeout", "3"])

    def released(tags: set[str], url: str, timeout: float = 60.0) -> None:
        """No session left, and no container of the workers that held them."""
        deadline = time.monotonic() + timeout
        while True:
            stats = httpx.get(f"{url}/stats", timeout=10).json()
            busy = stats["active_sessions"] + stats["closing_sessions"]
            if busy == 0 and docker_owned_by(tags) == 0:
                return
            assert time.monotonic() < deadline, f"{busy} sessions, containers of {tags} left"
            time.sleep(0.25)

    def open_and_step(url: str) -> Any:
        ws = connect(ws_url(url), max_size=None).__enter__()
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0, "task_id": task}}))
        assert json.loads(ws.recv(timeout=120))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"text": solution}}))
        reply = json.loads(ws.recv(timeout=120))
        assert reply["type"] == "observation" and reply["data"]["metadata"]["success"]
        return ws

    with server as url:
        assert server.proc is not None
        pid = server.proc.pid
        silent = open_and_step(url)  # keeps its socket open and says nothing
        tags = owner_tags(pid)
        assert docker_owned_by(tags) > 0
        released(tags, url)  # reaped after 3 s idle, its env closed
        with pytest.raises(Exception, match=r"1001|idle"):
            silent.send(json.dumps({"type": "state"}))
            silent.recv(timeout=10)
        vanished = open_and_step(url)
        tags = owner_tags(pid)
        assert docker_owned_by(tags) > 0
        vanished.socket.close()  # no close frame: the process died, say
        released(tags, url, timeout=2.5)  # at once, well before the idle timeout
        open_and_step(url).close()  # and the server still serves
