"""Teach a small model the tool-call *format* of TRL's env interface, not the task.

RL from a random-weight (or untuned) model gets no signal when no sampled reply is a well-formed
tool call: every rollout ends at once and every reward is equal. A short supervised warm start
on episodes whose actions are drawn uniformly from the env's valid actions fixes the format
while leaving the policy uninformed (every move equally likely), so what GRPO learns afterwards
is the task. Each training example is one turn of such an episode, rendered with the same chat
template and tool schema TRL uses; the loss covers only the assistant's reply (its tool call, or
a short closing message after the episode ended).

Also here: :func:`tool_chat_messages` turns the env's plain chat (user observations, assistant
actions) into the tool-call chat TRL trains on, so a TRL-trained model can be evaluated by the
harness under the conversation layout it was trained with.

Two layouts (:class:`ToolLayout`): TRL's generic ``act(action)`` tool (``tools=()``, the
study's recorded layout) and the env's typed tools (FrozenLake's ``move(direction)``, ...),
in which an action is the env's own tool call (:meth:`~multiturn_envs.core.TextEnv.as_tool_call`)
and the chat is the harness's tool layout (:func:`multiturn_envs.policies.tool_layout.
tool_conversation`), so a model trained so is evaluated by any tool-calling policy as it was
trained.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.core import TextEnv
from multiturn_envs.policies.tool_layout import tool_conversation
from multiturn_envs.tools import Tool, ToolCall, is_tool_call_text, read_tool_calls
from multiturn_envs.wrappers.turn_budget import text_env_of

__all__ = [
    "ACTION_PATTERN",
    "ACT_LAYOUT",
    "CLOSING_REPLY",
    "ToolLayout",
    "ToolLayoutTokenizer",
    "WarmStartReport",
    "random_tool_chats",
    "split_reply",
    "tool_call_message",
    "tool_chat_messages",
    "warm_start_tool_calls",
]

CLOSING_REPLY = "Done."
"""What the warm start teaches the model to say (no tool call) once the episode is over."""


def tool_call_message(action: str, tool_name: str = "act") -> dict[str, Any]:
    """An assistant message calling ``tool_name(action=action)``."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": tool_name, "arguments": {"action": action}}}
        ],
    }


def tool_chat_messages(
    messages: Sequence[Mapping[str, str]], system: str | None = None, tool_name: str = "act"
) -> list[dict[str, Any]]:
    """The env's chat (user, assistant, user, ...) in TRL's tool layout.

    The first user message stays a user message; every assistant action becomes a tool call and
    every later observation a ``tool`` message, which is how TRL renders an episode.
    """
    out: list[dict[str, Any]] = [] if not system else [{"role": "system", "content": system}]
    seen_user = False
    for message in messages:
        role, content = str(message["role"]), str(message["content"])
        if role == "assistant":
            out.append(tool_call_message(content, tool_name))
        elif role == "user" and seen_user:
            out.append({"role": "tool", "name": tool_name, "content": content})
        else:
            out.append({"role": role, "content": content})
            seen_user = seen_user or role == "user"
    return out


@dataclass(frozen=True)
class ToolLayout:
    """How a TRL-trained model sees an episode: TRL's generic tool (``tools=()``: the tool
    ``tool_name(action)``) or the env's typed tools (``tools``: the env's declarations)."""

    tools: tuple[Tool, ...] = ()
    tool_name: str = "act"

    @property
    def typed(self) -> bool:
        return bool(self.tools)

    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        system: str | None = None,
        env: TextEnv | None = None,
    ) -> list[dict[str, Any]]:
        """The env's history in this layout (a system message first when ``system``). Typed:
        text actions in the history (a replayed record's) become ``env``'s tool calls."""
        if not self.typed:
            return tool_chat_messages(messages, system, self.tool_name)
        history = [dict(m) for m in messages]
        if env is not None:
            for m in history:
                if m["role"] == "assistant" and not is_tool_call_text(m["content"]):
                    call = env.as_tool_call(m["content"])
                    if call is not None:
                        m["content"] = call.text()
        return tool_conversation(history, system or "", self.tools, native=True)

    def action(self, action: str, env: TextEnv) -> str:
        """What to step ``env`` with for the text ``action``: itself (generic layout), or the
        env's tool call for it (typed: the env's history then holds calls, as in training)."""
        if not self.typed or is_tool_call_text(action):
            return action
        call = env.as_tool_call(action)
        if call is None:
            raise ValueError(f"{type(env).__name__} has no tool call for the action {action!r:.60}")
        return call.text()

    def call_message(self, action: str, env: TextEnv | None = None) -> dict[str, Any]:
        """The assistant message that takes ``action`` in this layout."""
        if not self.typed:
            return tool_call_message(action, self.tool_name)
        if is_tool_call_text(action):
            calls = read_tool_calls(action, self.tools, max_calls=64, strict=False)
        else:
            call = None if env is None else env.as_tool_call(action)
            if call is None:
                raise ValueError(f"no tool call for the action {action!r:.60}")
            calls = [call]
        return {"role": "assistant", "content": "", "tool_calls": [c.openai() for c in calls]}

    def sentinel_message(self, sentinel: str) -> dict[str, Any]:
        """A call whose first string argument is ``sentinel`` (for :func:`tool_frames`)."""
        if not self.typed:
            return tool_call_message(sentinel, self.tool_name)
        tool = self.tools[0]
        name = tool.argument_names[0] if tool.argument_names else "x"
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [ToolCall(tool.name, {name: sentinel}).openai()],
        }


ACT_LAYOUT = ToolLayout()
"""TRL's generic ``act(action)`` tool (the study's recorded layout)."""


def random_tool_chats(
    env: gym.Env[str, str],
    tasks: Sequence[str],
    *,
    episodes: int,
    system: str = "",
    seed: int = 0,
    tool_name: str = "act",
    layout: ToolLayout | None = None,
) -> list[list[dict[str, Any]]]:
    """Whole episodes of uniformly random actions, each in TRL's tool layout.

    Sample text for :func:`~multiturn_envs.rl.tiny_agent.build_tiny_tool_model` to fit its
    tokenizer to. Episode ``i`` plays ``tasks[i % len(tasks)]`` from reset seed ``i``.
    ``layout``: the generic ``tool_name`` tool (default) or the env's typed tools.
    """
    layout = layout or ToolLayout(tool_name=tool_name)
    rng = np.random.default_rng(seed)
    base = text_env_of(env)
    chats: list[list[dict[str, Any]]] = []
    for i in range(episodes):
        env.reset(seed=i, options={"task_id": tasks[i % len(tasks)]})
        done = False
        while not done:
            action = layout.action(base.random_action(rng), base)
            _, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        chats.append(layout.chat(base.messages(), system))
    return chats


def split_reply(
    tokenizer: Any,
    tools: Sequence[Callable[..., Any]],
    context: Sequence[Mapping[str, Any]],
    target: Mapping[str, Any],
    **template_kwargs: Any,
) -> tuple[str, str]:
    """The template's prompt for ``context`` and the text of the ``target`` reply after it, up
    to and including EOS (not the template's newline after it): what a model generates.
    ``template_kwargs`` are the template's variables (``enable_thinking=False`` for Qwen3)."""
    prompt = tokenizer.apply_chat_template(
        list(context),
        tools=list(tools),
        add_generation_prompt=True,
        tokenize=False,
        **template_kwargs,
    )
    full = tokenizer.apply_chat_template(
        [*context, target], tools=list(tools), tokenize=False, **template_kwargs
    )
    if not (isinstance(prompt, str) and isinstance(full, str) and full.startswith(prompt)):
        raise ValueError("the chat template does not render the context as a prefix")
    reply = full[len(prompt) :]
    eos = tokenizer.eos_token or ""
    if eos and eos in reply:
        reply = reply[: reply.index(eos) + len(eos)]
    return prompt, reply


@dataclass
class WarmStartReport:
    """What :func:`warm_start_tool_calls` did: examples, optimiser steps, first and last loss."""

    examples: int
    steps: int
    first_loss: float
    last_loss: float


def _examples(
    make_env: Callable[[], gym.Env[str, str]],
    tasks: Sequence[str],
    system: str,
    episodes: int,
    rng: np.random.Generator,
    layout: ToolLayout,
) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(context, target message) pairs from uniformly random episodes."""
    env = make_env()
    base = text_env_of(env)
    pairs: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
    try:
        for i in range(episodes):
            task = tasks[i % len(tasks)]
            env.reset(seed=int(rng.integers(2**31)), options={"task_id": task})
            actions = base.valid_actions()
            if not actions:
                raise ValueError("the warm start needs an env with valid_actions()")
            done = False
            while not done:
                action = actions[int(rng.integers(len(actions)))]
                context = layout.chat(base.messages(), system)
                pairs.append((context, layout.call_message(action, base)))
                _, _, terminated, truncated, _ = env.step(layout.action(action, base))
                done = terminated or truncated
            context = layout.chat(base.messages(), system)
            pairs.append((context, {"role": "assistant", "content": CLOSING_REPLY}))
    finally:
        env.close()
    return pairs


def warm_start_tool_calls(
    model: Any,
    tokenizer: Any,
    make_env: Callable[[], gym.Env[str, str]],
    tools: Sequence[Callable[..., Any]],
    *,
    tasks: Sequence[str],
    system: str = "",
    episodes: int = 16,
    steps: int = 60,
    batch_size: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
    tool_name: str = "act",
    layout: ToolLayout | None = None,
) -> WarmStartReport:
    """Supervised steps on random-action episodes in the tool-call layout (in place).

    Args:
        model: a causal LM in train-able state (its parameters are updated).
        tokenizer: its tokenizer; the chat template must render ``tools`` and tool calls.
        make_env: builds the env the episodes are drawn from.
        tools: the tool callables TRL exposes (e.g. ``[TRLEnvironment(...).act]``), rendered
            into the prompt exactly as TRL renders them.
        tasks: task ids to draw episodes from (cycled).
        system: the system prompt of the training rows.
        episodes, steps, batch_size, lr, seed: size and optimiser settings.
        layout: the generic ``tool_name`` tool (default) or the env's typed tools.
    """
    import torch

    rng = np.random.default_rng(seed)
    layout = layout or ToolLayout(tool_name=tool_name)
    pairs = _examples(make_env, tasks, system, episodes, rng, layout)
    rows: list[tuple[list[int], int]] = []
    for context, target in pairs:
        prompt, reply = split_reply(tokenizer, tools, context, target)
        p_ids = tokenizer.encode(prompt, add_special_tokens=False)
        r_ids = tokenizer.encode(reply, add_special_tokens=False)
        rows.append((p_ids + r_ids, len(p_ids)))
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    model.train()
    losses: list[float] = []
    for _ in range(steps):
        pick = torch.randint(len(rows), (min(batch_size, len(rows)),), generator=generator)
        batch = [rows[int(i)] for i in pick]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for j, (ids, start) in enumerate(batch):
            input_ids[j, : len(ids)] = torch.tensor(ids)
            labels[j, start : len(ids)] = torch.tensor(ids[start:])
            mask[j, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    model.eval()
    return WarmStartReport(len(rows), steps, losses[0], losses[-1])


ACTION_PATTERN = r'"action"\s*:\s*"((?:[^"\\]|\\.)*)"'
"""Pulls the ``action`` argument out of a tool call (for ``ActionExtractor(pattern=...)``)."""


class ToolLayoutTokenizer:
    """A tokenizer view that renders the env's plain chat in TRL's tool layout, with ``tools``.

    For evaluating a model trained through :mod:`multiturn_envs.adapters.trl` with the harness:
    give it to :class:`~multiturn_envs.policies.transformers_backend.TransformersPolicy` (with
    ``extractor=ActionExtractor(ACTION_PATTERN)``) and the model sees each turn exactly as in
    training (actions as tool calls, observations as tool results, the tool schema in the system
    block), and its scoring prompter scores each action as that call (:meth:`reply_text`).
    Everything but ``apply_chat_template`` and ``reply_text`` is the wrapped tokenizer's.
    """

    def __init__(
        self, tokenizer: Any, tools: Sequence[Callable[..., Any]], tool_name: str = "act"
    ) -> None:
        self._tokenizer = tokenizer
        self._tools = list(tools)
        self._tool_name = tool_name
        self._replies: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("tools", self._tools)
        chat = tool_chat_messages(conversation, None, self._tool_name)
        return self._tokenizer.apply_chat_template(chat, **kwargs)

    def reply_text(self, action: str, **template_kwargs: Any) -> str:
        """What the model emits for ``action`` in this layout: the template's tool call, up to
        (not including) EOS, under the prompts' template variables. The harness's scoring
        prompter scores these tokens, so action NLL and LLR of a tool-trained model cover the
        call it would have to generate. Memoised: a turn renders the template twice."""
        key = (action, tuple(sorted((k, repr(v)) for k, v in template_kwargs.items())))
        known = self._replies.get(key)
        if known is not None:
            return known
        context = [{"role": "user", "content": "x"}]
        target = tool_call_message(action, self._tool_name)
        _, reply = split_reply(self._tokenizer, self._tools, context, target, **template_kwargs)
        eos = self._tokenizer.eos_token or ""
        text = reply[: -len(eos)] if eos and reply.endswith(eos) else reply
        if len(self._replies) < 65536:  # actions are short and few; bound it all the same
            self._replies[key] = text
        return text

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)
