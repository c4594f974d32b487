"""The OpenAI-compatible backend against a hostile server: every answer of any shape or depth
is a reply the env answers with a clear observation (a malformed tool call: a turn spent), or
one clear :class:`ServerError` (an answer that is not a chat completion at all); never a
``RecursionError``, an ``AttributeError`` or a ``KeyError`` (issue 29).

A real HTTP server on loopback sends each answer as raw bytes, so the client's whole path is
exercised (streamed body, size and time bounds, JSON decoding, the envelope, the calls).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from llm_support import request

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.policies.base import TurnRequest
from multiturn_envs.policies.openai_backend import OpenAIPolicy, ServerError
from multiturn_envs.policies.sampling import Sampling

START = [{"role": "user", "content": "You are at row 0. Action?"}]


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the bytes at the head of ``answers`` (a GET: the model list)."""

    answers: list[bytes | tuple[str, bytes]]

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(json.dumps({"data": [{"id": "m"}]}).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        answer = self.answers.pop(0)
        if isinstance(answer, tuple):  # ("trickle", bytes): one byte every 0.2 s, never ending
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(10**9))
            self.end_headers()
            try:
                while True:
                    self.wfile.write(answer[1][:1])
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                return
        self._send(answer)

    def _send(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client may hang up first (a size bound)
            self.wfile.write(data)


@pytest.fixture
def hostile() -> Iterator[tuple[str, list[bytes | tuple[str, bytes]]]]:
    answers: list[bytes | tuple[str, bytes]] = []
    handler = type("Handler", (_Hostile,), {"answers": answers})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()


def _chat(message: Any, **choice: Any) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": message, **choice}]}).encode()


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def _lake_request(env: Any) -> TurnRequest:
    return TurnRequest(env.message_view(), env, 0, "lake", env.system_prompt(), tuple(env.tools()))


# the tool_calls of one answer, and a word the env's observation must hold
ENTRIES: list[tuple[str, Any, str]] = [
    ("arguments a string 990 deep", [{"function": {"name": "move", "arguments": _nested(990)}}],
     "nested too deeply"),
    ("arguments an object 400 deep",
     [{"function": {"name": "move", "arguments": json.loads(_nested(400))}}], "nested too deeply"),
    ('"function": "move"', [{"type": "function", "function": "move"}], "only"),
    ("an entry that is a string", ["move"], "got str"),
    ("an entry that is a list", [["move", {"direction": "Left"}]], "got list"),
    ("an empty entry", [{}], "name"),
    ("a name that is not a string", [{"function": {"name": 5, "arguments": "{}"}}], "name"),
    ("no name", [{"function": {"arguments": "{}"}}], "name"),
    ("arguments a number", [{"function": {"name": "move", "arguments": 5}}], "JSON object"),
    ("arguments a list", [{"function": {"name": "move", "arguments": [1]}}], "JSON object"),
    ("arguments not JSON", [{"function": {"name": "move", "arguments": "{oops"}}], "not valid"),
    ("tool_calls an object", {"function": {"name": "move", "arguments": "{}"}}, "direction"),
    ("tool_calls a string", "move", "got str"),
    ("an unknown tool", [{"function": {"name": "fly", "arguments": "{}"}}], "no tool"),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "entries", "said"), ENTRIES, ids=[e[0] for e in ENTRIES])
def test_tool_calls_of_any_shape_or_depth_cost_at_most_a_turn(
    hostile: tuple[str, list[Any]], shape: str, entries: Any, said: str
) -> None:
    """Bound: a ``tool_calls`` entry of any shape, or arguments nested up to what ``json``
    decodes (990 levels), is read into the env's action text, which the env refuses with a
    clear observation naming the problem: one turn, the episode goes on."""
    url, answers = hostile
    answers.append(_chat({"role": "assistant", "content": None, "tool_calls": entries}))
    env = gym.make("MT/FrozenLake-v0", max_turns=3, is_slippery=False).unwrapped
    env.reset(seed=0, options={"task_id": "4x4"})
    pol = OpenAIPolicy(url, "m", Sampling(max_tokens=8), server="generic", tools=True)
    (reply,) = pol.act([_lake_request(env)])
    assert reply.tool_calls is not None and reply.text.startswith("<tool_call>"), shape
    observation, _, terminated, truncated, info = env.step(reply.text)
    assert info["parse_error"] and said in observation, (shape, observation[:300])
    assert env.turn == 1 and not (terminated or truncated)
    assert len(reply.text) < 300_000


ENVELOPES: list[tuple[str, bytes | tuple[str, bytes], str]] = [
    ("choices not a list", b'{"choices": {"a": 1}}', "choices is dict"),
    ("no choices", b'{"id": "x"}', "choices is null"),
    ("a choice that is a string", b'{"choices": ["hi"]}', "choices[0] is str"),
    ("a message that is a list", _chat(["hi"]), "message is list"),
    ("content that is a list", _chat({"content": [{"type": "text"}]}), "content is list"),
    ("token ids that are strings", _chat({"content": "x"}, token_ids=["1"]), "token_ids[0]"),
    ("logprobs of the wrong shape", _chat({"content": "x"}, logprobs={"content": [5]}), "logprobs"),
    ("the answer a JSON list", b"[1, 2]", "it is list"),
    ("not JSON", b"<html>", "non-JSON"),
    ("JSON 100,000 deep", ("[" * 100_000 + "]" * 100_000).encode(), "nested too deeply"),
    ("a body that never ends", ("trickle", b"{"), "did not finish"),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "answer", "said"), ENVELOPES, ids=[e[0] for e in ENVELOPES])
def test_an_answer_that_is_not_a_completion_is_one_clear_error(
    hostile: tuple[str, list[Any]], shape: str, answer: bytes | tuple[str, bytes], said: str
) -> None:
    """Bound: an answer that is not a chat completion (a field of the wrong type, JSON nested
    past what ``json`` decodes, a body that trickles for ever: ``timeout_s``) is a
    :class:`ServerError` naming what is wrong, never another exception."""
    url, answers = hostile
    answers.append(answer)
    pol = OpenAIPolicy(url, "m", Sampling(max_tokens=8), server="generic", timeout_s=2.0)
    pol.client.max_retries = 0
    start = time.monotonic()
    with pytest.raises(ServerError) as raised:
        pol.act([request(START)])
    assert said in str(raised.value), (shape, str(raised.value))
    assert time.monotonic() - start < 20


def test_an_answer_over_the_size_bound_is_refused_unread(hostile: tuple[str, list[Any]]) -> None:
    """Bound: ``max_response_bytes`` (1 GiB by default; 1 MiB here): a larger body is
    refused as it streams, never decoded."""
    url, answers = hostile
    answers.append(_chat({"content": "x" * (2 << 20)}))
    pol = OpenAIPolicy(url, "m", Sampling(max_tokens=8), server="generic")
    pol.client.max_response_bytes = 1 << 20
    with pytest.raises(ServerError, match="more than 1,048,576 bytes"):
        pol.act([request(START)])


def test_a_finish_reason_of_another_type_never_reaches_a_record(
    hostile: tuple[str, list[Any]],
) -> None:
    """What a record keeps of a reply (``finish_reason``, the raw ``tool_calls``) is plain and
    bounded whatever the server sent: a nested finish reason is dropped, deep raw calls are
    not kept."""
    url, answers = hostile
    deep = [{"function": {"name": "move", "arguments": json.loads(_nested(300))}}]
    answers.append(_chat({"content": "up", "tool_calls": deep}, finish_reason=[[["stop"]]]))
    pol = OpenAIPolicy(url, "m", Sampling(max_tokens=8), server="generic", tools=True)
    (reply,) = pol.act([request(START)])
    assert reply.meta["finish_reason"] is None and "tool_calls_raw" not in reply.meta
    json.dumps(reply.meta)
