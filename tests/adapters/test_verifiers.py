"""verifiers adapter through verifiers' own evaluation path (``vf-eval``) against a real server.

The model server is vLLM's CPU build (its own environment, ``MTE_VLLM_PYTHON``) serving the
tests' tiny random chat model; ``vf-eval`` loads our taskset by id from a two-line module,
runs each episode with verifiers' ``null`` harness (its chat program, prepared by ``uv``) in a
subprocess runtime, and writes ``traces.jsonl``. The test checks the traces against the env:
each episode's actions (the model's replies, whatever they are) replayed in-process give the
recorded turns, step scores and success, and the rubric's reward is success + 0.1 x the mean
step score.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import multiturn_envs  # noqa: F401
from multiturn_envs.testing import require

pytestmark = pytest.mark.timeout(1800)  # trains, or runs whole evaluations: long

SHIM = (
    "from multiturn_envs.adapters.verifiers import MTEnv, MTTaskset\n\n"
    '__all__ = ["MTEnv", "MTTaskset"]\n'
)


def replay(env_id: str, task_id: str, seed: int, max_turns: int, actions: list[str]) -> list[Any]:
    env = gym.make(env_id, disable_env_checker=True, max_turns=max_turns)
    env.reset(seed=seed, options={"task_id": task_id})
    infos = []
    for action in actions:
        *_, info = env.step(action)
        infos.append(info)
    env.close()
    return infos


def vf_eval(vllm_server: str, tmp_path: Path, *extra: str, n: int = 4) -> list[dict[str, Any]]:
    """``vf-eval mt-envs-vf`` on FrozenLake (max 3 turns) with the null harness; the traces."""
    binary = Path(sys.executable).parent / "vf-eval"
    require(binary.exists(), "verifiers' vf-eval (the [verifiers] extra)")
    require(shutil.which("uv", path=str(binary.parent)) is not None, "uv (verifiers' null harness)")
    (tmp_path / "mt_envs_vf.py").write_text(SHIM)
    env_id, max_turns = "MT/FrozenLake-v0", 3
    repo = Path(__file__).resolve().parents[2]
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo), os.environ.get("PYTHONPATH", "")]),
        "PATH": os.pathsep.join([str(binary.parent), os.environ.get("PATH", "")]),
        "OPENAI_API_KEY": "local",
    }
    cmd = [
        str(binary), "mt-envs-vf",
        "--env.taskset.env-id", env_id, "--env.taskset.num-tasks", "2",
        "--env.taskset.seeds", "0", "1", "--env.taskset.max-turns", str(max_turns),
        "--env.player.harness.id", "null", "--env.player.runtime.type", "subprocess",
        "--env.player.max-turns", "8",
        "--client.base-url", f"{vllm_server}/v1", "--client.api-key-var", "OPENAI_API_KEY",
        "-m", "tiny", "--sampling.max-tokens", "24", "--sampling.temperature", "1.0",
        "-n", str(n), "-r", "1", "-c", "4", "--no-push", "-o", str(tmp_path / "outputs"),
        *extra,
    ]  # fmt: skip
    done = subprocess.run(
        cmd, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    traces_files = list((tmp_path / "outputs").rglob("traces.jsonl"))
    assert len(traces_files) == 1, done.stdout[-2000:]
    traces = [json.loads(line) for line in traces_files[0].read_text().splitlines()]
    assert len(traces) == n
    return traces


def test_vf_eval_runs_an_mt_env_against_a_real_openai_server(
    vllm_server: str, tmp_path: Path
) -> None:
    from verifiers.v1.trace import Trace

    from multiturn_envs.adapters.verifiers import episode_of
    from multiturn_envs.rewards import Outcome

    env_id, max_turns = "MT/FrozenLake-v0", 3
    traces = vf_eval(vllm_server, tmp_path)
    for line in traces:
        assert line["ok"], line["errors"]
        (trace,) = line["traces"]  # one agent: the player
        episode = trace["info"]["mt"]
        assert trace["rewards"]["success"]["weight"] == 1.0
        assert trace["rewards"]["step_score"]["weight"] == 0.1
        assert 1 <= episode["turns"] <= max_turns
        # what the adapter acted on (verifiers' ``last_reply``): a reply that vLLM's tool parser
        # read as a call has no ``content`` in the serialised trace, and is the empty action
        replies = [
            (m.get("content") or "").strip()
            for m in trace_messages(trace)
            if m["role"] == "assistant"
        ]
        assert len(replies) == episode["turns"]
        infos = replay(env_id, episode["task_id"], episode["seed"], max_turns, replies)
        assert [i["step_score"] for i in infos] == episode["step_scores"]
        assert bool(infos[-1]["success"]) == episode["success"]
        assert trace["rewards"]["success"]["score"] == float(episode["success"])
        mean = sum(episode["step_scores"]) / len(episode["step_scores"])
        assert trace["rewards"]["step_score"]["score"] == pytest.approx(mean)
        assert trace["metrics"]["turns"] == episode["turns"]
        # per-step credit where prime-rl reads it: one state score per sampled turn, read
        # back through verifiers' own Trace model
        parsed = Trace.model_validate(trace)
        scores = parsed.info["turn_rewards"]
        assert len(scores) == parsed.num_turns == episode["turns"]
        credits = parsed.info["turn_credits"]
        assert scores == pytest.approx([sum(credits[: t + 1]) for t in range(len(credits))])
        assert scores[-1] == pytest.approx(Outcome().score(episode_of(parsed)))


def test_vf_eval_with_the_env_tools_and_a_registered_reward(
    vllm_server: str, tmp_path: Path
) -> None:
    """Tools in the task's prompt, the registry's process reward as the trace's one reward;
    a reply without a tool call ends the episode (the tiny random model never calls)."""
    traces = vf_eval(
        vllm_server, tmp_path, "--env.taskset.tools", "true", "--env.taskset.reward", "process",
        n=2,
    )  # fmt: skip
    for line in traces:
        assert line["ok"], line["errors"]
        (trace,) = line["traces"]
        assert set(trace["rewards"]) == {"registered"}
        assert trace["rewards"]["registered"]["weight"] == 1.0
        system = trace_messages(trace)[0]["content"]
        assert "<tools>" in system and '"name": "move"' in system
        episode = trace["info"]["mt"]
        calls = [m for m in trace_messages(trace) if m["role"] == "assistant"]
        if episode["end"] == "agent_stopped":  # no call: no turn, an unscored sampled turn
            assert trace["info"]["turn_rewards"][-1] is None
            assert episode["turns"] == len(calls) - 1
        else:
            assert all("<tool_call>" in (m["content"] or "") for m in calls)


def trace_messages(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation of a serialised verifiers trace, in order (its message nodes)."""
    return [node["message"] for node in trace["nodes"]]


def test_tool_calls_of_any_shape_in_a_trace_message_are_one_turn() -> None:
    """Bound: whatever a harness puts in an assistant message's ``tool_calls`` (a string, a
    list, an object whose ``model_dump`` fails, arguments 2,000 deep, a ``tool_calls`` that is
    not a list) is read into an action the env refuses with its observation: one turn, never
    an AttributeError or a RecursionError in the adapter."""
    from types import SimpleNamespace

    require(importlib.util.find_spec("verifiers") is not None, "the package 'verifiers'")
    from multiturn_envs.adapters.verifiers import _action_of

    class Broken:
        def model_dump(self) -> Any:
            raise ValueError("cannot dump")

    deep: Any = "Up"
    for _ in range(2_000):
        deep = {"a": deep}
    shapes: list[Any] = [
        ["move"],
        [["move"]],
        [Broken()],
        [{"function": {"name": "move", "arguments": deep}}],
        {"function": {"name": "move", "arguments": "{}"}},
        "move",
    ]
    env = gym.make("MT/FrozenLake-v0", max_turns=len(shapes) + 1, is_slippery=False).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    for turn, entries in enumerate(shapes, 1):
        message = SimpleNamespace(role="assistant", tool_calls=entries)
        action, calls = _action_of(SimpleNamespace(last_reply="", messages=[message]), True)
        observation, _, _, _, info = env.step(action)
        assert info["parse_error"] and "Tool call error" in observation, (entries, observation)
        assert env.turn == turn and calls is not None
