"""A tiny offline model ready for TRL's tool-calling env interface, for tests and toy recipes.

:func:`multiturn_envs.rl.tiny_lm.build_tiny_chat_model` gives a random Qwen2 model with a
512-token BPE trained on generic lines; on a FrozenLake prompt with a tool schema that tokenizer
spends about one token per character (~1,300 tokens a prompt), which makes CPU training crawl.
This re-fits the tokenizer to the text the agent will actually see (the env's observations, the
system prompt, the tool schema and tool calls, so the whole byte alphabet plus merges of that
text), resizes the model's embeddings to it, and installs TRL's Qwen2.5 chat template, which
renders tools and tool calls and which TRL knows how to parse. The weights stay random: this
is a stand-in for a real checkpoint, never a model of anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "build_tiny_tool_model",
    "tool_chat_template",
    "tool_frames",
]


def tool_chat_template() -> str:
    """TRL's Qwen2.5 template: renders ``tools``, tool calls and ``tool`` messages."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return str(qwen2_5_chat_template)


def tool_frames(
    tokenizer: Any,
    tools: Sequence[Any],
    system: str,
    tool_name: str = "act",
    layout: Any = None,
) -> list[str]:
    """The fixed strings of a tool chat: the system block with the tool schema, and the text
    before and after the action inside a tool call (what the template renders around it).
    ``layout``: a :class:`~multiturn_envs.rl.tool_format.ToolLayout` (default: the generic
    ``tool_name`` tool)."""
    from multiturn_envs.rl.tool_format import ToolLayout

    sentinel = "Qz7SENTINELQz7"  # survives tojson unescaped
    head = tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": sentinel}],
        tools=list(tools),
        tokenize=False,
    )
    context = [{"role": "user", "content": "x"}]
    opened = tokenizer.apply_chat_template(context, add_generation_prompt=True, tokenize=False)
    layout = layout or ToolLayout(tool_name=tool_name)
    call = tokenizer.apply_chat_template(
        [*context, layout.sentinel_message(sentinel)], tokenize=False
    )
    before, after = call[len(opened) :].split(sentinel)
    eos = tokenizer.eos_token or ""
    after = after[: after.index(eos)] if eos and eos in after else after
    pieces = [head.split(sentinel)[0], before, after]
    specials = [t.content for t in tokenizer.added_tokens_decoder.values()]
    for special in specials:  # an added token cannot span a special one
        pieces = [part for piece in pieces for part in piece.split(special)]
    return [p for p in dict.fromkeys(pieces) if len(p.strip()) > 1]


def build_tiny_tool_model(
    directory: str | Path,
    conversations: Iterable[Sequence[dict[str, Any]]],
    *,
    tools: Sequence[Any] = (),
    system: str = "",
    extra_texts: Iterable[str] = (),
    vocab_size: int = 2048,
    seed: int = 0,
    layout: Any = None,
    **model_kwargs: Any,
) -> Path:
    """Write a tiny random chat model whose tokenizer fits the given chats; return the folder.

    Args:
        directory: where to save (model, tokenizer, template).
        conversations: sample chats in TRL's tool layout
            (:func:`~multiturn_envs.rl.tool_format.tool_chat_messages`), rendered with ``tools``.
        tools: the tool callables TRL exposes; with them, the fixed frame of the chat (the
            system block with the tool schema, the text around an action in a tool call) becomes
            one added token each, so a tool call is a handful of tokens (:func:`tool_frames`).
        system: the system prompt of the training rows (part of the first frame).
        extra_texts: more sample text (replies, messages).
        vocab_size: the re-fitted tokenizer's size (special tokens and all 256 bytes included).
        seed: the weights' seed.
        layout: the chats' :class:`~multiturn_envs.rl.tool_format.ToolLayout` (default: the
            generic ``act`` tool), for the frames.
        **model_kwargs: passed to :func:`~multiturn_envs.rl.tiny_lm.build_tiny_chat_model`.
    """
    import torch

    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model, load_tiny_chat_model

    out = build_tiny_chat_model(directory, seed=seed, **model_kwargs)
    model, tokenizer = load_tiny_chat_model(out)
    tokenizer.chat_template = tool_chat_template()
    corpus = [
        tokenizer.apply_chat_template(list(c), tools=list(tools) or None, tokenize=False)
        for c in conversations
    ]
    corpus += list(extra_texts)
    if not corpus:
        raise ValueError("no sample text: the tokenizer needs some to fit")
    frames = tool_frames(tokenizer, tools, system, layout=layout) if tools else []
    fitted = tokenizer.train_new_from_iterator(corpus + frames, vocab_size=vocab_size)
    fitted.add_tokens(frames)
    fitted.chat_template = tool_chat_template()
    fitted.pad_token = tokenizer.pad_token
    fitted.eos_token = tokenizer.eos_token
    with torch.random.fork_rng():  # the new rows come from the global RNG: seed it, restore it
        torch.manual_seed(seed)
        model.resize_token_embeddings(len(fitted), mean_resizing=False)
    for name in ("eos_token_id", "pad_token_id"):
        setattr(model.config, name, getattr(fitted, name))
        setattr(model.generation_config, name, getattr(fitted, name))
    model.config.bos_token_id = fitted.pad_token_id
    model.save_pretrained(out)
    fitted.save_pretrained(out)
    return out
