"""The conversation a model sees: the system prompt and the chat messages of an episode.

``TurnRequest.messages`` (the env's observations and the actions it received) behind one system
message: an explicit ``system_prompt``, else the env's ``system_prompt()`` (or, with tools,
``tool_system_prompt()``), else :data:`DEFAULT_SYSTEM_PROMPT`. Every backend, the scorers and
the likelihood analyses build it here, so what is scored is what was prompted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from multiturn_envs.policies.base import TurnRequest

__all__ = ["DEFAULT_SYSTEM_PROMPT", "build_conversation", "system_prompt_for"]

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent acting in a multi-turn text environment. Each user message is the "
    "environment's observation. Reply with your next action only, in the format the environment "
    "asks for."
)


def system_prompt_for(
    request: TurnRequest, override: str | None = None, tools: bool = False
) -> str:
    """``override`` if given, else the env's system prompt (carried by the request, or read
    from its env; with ``tools``, its ``tool_system_prompt``), else the default. The harness
    fills the request's prompts, so a policy on a Ray actor (no env) is prompted exactly as a
    local one."""
    if override is not None:
        return override
    carried = request.tool_system_prompt if tools else request.system_prompt
    if carried is not None:
        return carried or DEFAULT_SYSTEM_PROMPT
    env: Any = getattr(request.env, "unwrapped", request.env)  # None on a remote policy actor
    method = "tool_system_prompt" if tools else "system_prompt"
    own = getattr(env, method)() if hasattr(env, method) else ""
    return own or DEFAULT_SYSTEM_PROMPT


def build_conversation(
    messages: Sequence[Mapping[str, str]], system: str, fold_system: bool = False
) -> list[dict[str, str]]:
    """The chat messages a model sees: ``system`` first (or folded into the first user turn)."""
    conv = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
    if not system:
        return conv
    if fold_system:
        if conv and conv[0]["role"] == "user":
            conv[0] = {"role": "user", "content": f"{system}\n\n{conv[0]['content']}"}
            return conv
        return [{"role": "user", "content": system}, *conv]
    return [{"role": "system", "content": system}, *conv]
