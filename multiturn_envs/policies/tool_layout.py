"""Episodes with typed tools, for LLMs: the tool layout of a conversation and the call parser.

An env's history is text (user observations, assistant actions; a tool call is recorded as its
canonical ``<tool_call>`` text, :mod:`multiturn_envs.tools`). A model with native tool calling
wants it in its chat template's tool layout: the tools in the prompt, each action that called a
tool as an assistant message with ``tool_calls``, and the observation after it as a ``tool``
message. Two renderings, chosen per template:

* **native**: the template renders ``tools``, ``tool_calls`` and the ``tool`` role itself
  (Qwen2.5/Qwen3, Llama 3.1, TRL's training templates; detected by rendering a probe);
* **Hermes text**, for templates that ignore tools (SmolLM2's, plain ChatML): the tools go
  into the system message in the Hermes/Qwen wording (``<tools>...</tools>``), a call is the
  assistant's ``<tool_call>`` text and a result a user message in ``<tool_response>`` tags,
  which is the text a Qwen-style template would have rendered.

Completions are read with the Hermes/Qwen parser (:func:`parse_hermes`): the ``<tool_call>``
blocks of the reply are the action (each well-formed block in canonical form, a malformed one
verbatim so the env says what is wrong), the text around them is dropped from the action (it
stays in ``raw_text``); a reply with no ``<tool_call>`` at all has no call, and whether that
ends the episode is the env's rule (:func:`replies_stop`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from multiturn_envs.tools import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    Tool,
    ToolCall,
    ToolCallError,
    is_tool_call_text,
    read_tool_calls,
)

HERMES_TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
HERMES_TOOLS_FOOTER = (
    "</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
"""The wording Qwen2.5's template (and Hermes models) use to present tools."""

PARSERS: tuple[str, ...] = ("hermes",)
"""Tool-call parsers this layer implements (Hermes/Qwen ``<tool_call>`` JSON blocks)."""

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_PROBE = "Qz7probe_tool"


def hermes_system(system: str, tools: Sequence[Tool]) -> str:
    """``system`` followed by the tools in the Hermes wording (one JSON function a line)."""
    lines = "\n".join(json.dumps(t.openai(), ensure_ascii=False) for t in tools)
    block = f"{HERMES_TOOLS_HEADER}\n{lines}\n{HERMES_TOOLS_FOOTER}"
    return f"{system}\n\n{block}" if system else block


def _calls_of(text: str) -> list[ToolCall] | None:
    """The calls of a (canonical or model-written) tool-call text, read loosely; ``None`` when
    it does not read as calls (it is then rendered as the text it is)."""
    try:
        return read_tool_calls(text, (), max_calls=64, strict=False)
    except ToolCallError:
        return None


def tool_conversation(
    messages: Sequence[Mapping[str, str]],
    system: str,
    tools: Sequence[Tool],
    *,
    native: bool,
    fold_system: bool = False,
) -> list[dict[str, Any]]:
    """The chat messages a tool-calling model sees for an env's history.

    ``native``: assistant calls as ``tool_calls`` messages and results as ``tool`` messages
    (the template renders both, with ``tools`` passed to it); else the Hermes text layout
    (module docstring), with the tools described in the system message.
    """
    if not native and tools:
        system = hermes_system(system, tools)
    out: list[dict[str, Any]] = []
    after_call: list[ToolCall] | None = None
    for message in messages:
        role, content = str(message["role"]), str(message["content"])
        if role == "assistant":
            calls = _calls_of(content) if is_tool_call_text(content) else None
            if native and calls:
                out.append(
                    {"role": "assistant", "content": "", "tool_calls": [c.openai() for c in calls]}
                )
            else:
                out.append({"role": "assistant", "content": content})
            after_call = calls if is_tool_call_text(content) else None
        elif role == "user" and after_call is not None:
            if native:
                name = after_call[0].name if after_call else "tool"
                out.append({"role": "tool", "name": name, "content": content})
            else:
                out.append(
                    {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
                )
            after_call = None
        else:
            out.append({"role": role, "content": content})
            after_call = None
    if not system:
        return out
    if fold_system:
        if out and out[0]["role"] == "user":
            out[0] = {"role": "user", "content": f"{system}\n\n{out[0]['content']}"}
            return out
        return [{"role": "user", "content": system}, *out]
    return [{"role": "system", "content": system}, *out]


def parse_hermes(text: str) -> tuple[str, list[ToolCall] | None]:
    """The action of a completion and its well-formed calls (Hermes/Qwen ``<tool_call>``).

    With no ``<tool_call>`` in ``text``: ``(text, None)``, a reply without a call. Otherwise the
    action is the reply's blocks only (text around them dropped), each well-formed one in
    canonical form and each malformed one (broken JSON, a block cut off by the length limit)
    verbatim, so the env reads exactly what the model wrote and says what is wrong; the list
    holds the well-formed calls.
    """
    if TOOL_CALL_OPEN not in text:
        return text, None
    parts: list[str] = []
    calls: list[ToolCall] = []
    for match in _BLOCK.finditer(text):
        raw = match.group(0)
        read = _calls_of(raw) if raw.endswith(TOOL_CALL_CLOSE) else None
        if read:
            calls.extend(read)
            parts.extend(c.text() for c in read)
        else:
            parts.append(raw)
    return "\n".join(parts), calls


def replies_stop(
    reply_tool_calls: list[ToolCall] | None, action: str, reply_without_call: str
) -> bool:
    """THE rule for replies that call no tool (shared by the harness and training).

    In a tool-calling episode (``reply_tool_calls`` is not ``None``: the policy was given the
    env's tools), a reply with no tool call at all (no ``<tool_call>`` in it) is not an action
    when the env says ``reply_without_call == "stop"`` (the default): the agent is done, the
    episode ends there and no turn is spent, as TRL ends a rollout at a reply without a call.
    Envs where a plain reply means something (BFCL: a message to the user ends the user turn)
    say ``"action"``. In a text episode every reply is an action.
    """
    if reply_tool_calls is None:
        return False
    return reply_without_call == "stop" and not is_tool_call_text(action)


def renders_tools_natively(tokenizer: Any, **template_kwargs: Any) -> bool:
    """Whether the chat template renders ``tools`` and assistant ``tool_calls`` itself."""
    tool = Tool(_PROBE, "probe", {"type": "object", "properties": {"qz": {"type": "string"}}})
    call = ToolCall(_PROBE, {"qz": "Qz7arg"})
    try:
        listed = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}],
            tools=[tool.openai()],
            tokenize=False,
            add_generation_prompt=True,
            **template_kwargs,
        )
        called = tokenizer.apply_chat_template(
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [call.openai("c0")]},
                {"role": "tool", "name": _PROBE, "content": "Qz7result"},
            ],
            tools=[tool.openai()],
            tokenize=False,
            **template_kwargs,
        )
    except Exception:  # a template that chokes on tools or tool roles renders them as text
        return False
    return (
        isinstance(listed, str)
        and isinstance(called, str)
        and _PROBE in listed
        and "Qz7arg" in called
        and "Qz7result" in called
    )


__all__ = [
    "HERMES_TOOLS_FOOTER",
    "HERMES_TOOLS_HEADER",
    "PARSERS",
    "hermes_system",
    "parse_hermes",
    "renders_tools_natively",
    "replies_stop",
    "tool_conversation",
]
