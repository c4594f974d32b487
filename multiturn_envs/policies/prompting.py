"""The chat-prompting layer that every LLM backend shares.

One package decides how an episode becomes model input and how model output becomes an action,
so that the transformers, vLLM and HTTP backends prompt identically and what is *scored* later is
exactly what was *generated*:

* **Conversation** (:mod:`.conversation`): the episode's messages behind one system prompt.
* **Chat template.** The model's own (``tokenizer.apply_chat_template``), with
  ``chat_template_kwargs`` (e.g. ``{"enable_thinking": False}`` for Qwen3). Templates live here,
  never in envs.
* **Token ids built incrementally.** Re-rendering a conversation and re-tokenising it each turn
  does *not* give back the ids the model produced: BPE merges across the boundary of a generated
  span (``[198, 198]`` re-encodes as ``[271]``), templates rewrite history (Qwen3 drops earlier
  ``<think>`` blocks), and the template closes an assistant turn with text the model never
  generated (ChatML's ``"\\n"`` after ``<|im_end|>``). So the next prompt of an episode is
  *previous prompt ids + generated ids + ids of the newly rendered part only*. The prompt of every
  turn is then a token prefix of the next one (prefix caching hits) and a whole trajectory is
  one token sequence whose action spans are the generated ids verbatim (one scoring request).
* **Action extraction** (:mod:`.action_extractor`): what of a completion the env gets.
* **Tools** (``tools=True``): the env's tools (``TurnRequest.tools``) are rendered through the
  model's chat template (or in the Hermes wording for templates that ignore tools), the
  history in the tool layout, and the completion read with the Hermes/Qwen parser
  (:mod:`multiturn_envs.policies.tool_layout`): the action is the canonical text of the calls.
* **Sampling settings and seeds** (:mod:`.sampling`), the same for all backends.
* **Token sequences** (:mod:`.token_sequences`): what a record keeps of a reply's ids, and the
  exact sequences a scoring model gets.

This module holds the chat-template layer itself: :class:`ChatPrompter`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from multiturn_envs.policies.action_extractor import ActionExtractor
from multiturn_envs.policies.base import Reply, TokenUsage, TurnRequest
from multiturn_envs.policies.conversation import build_conversation, system_prompt_for
from multiturn_envs.policies.token_sequences import ScoringSequence
from multiturn_envs.policies.tool_layout import (
    parse_hermes,
    renders_tools_natively,
    tool_conversation,
)
from multiturn_envs.tools import Tool, ToolCall

__all__ = ["ChatPrompter"]

FinishReason = Literal["stop", "length"]


# ---------------------------------------------------------------------------------- tokenizer
class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer this layer uses (vLLM's ``get_tokenizer()`` too)."""

    eos_token_id: int | None

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: Any, skip_special_tokens: bool = ...) -> str: ...

    def convert_ids_to_tokens(self, ids: int) -> str: ...


def reply_text_of(tokenizer: Any, action: str, **template_kwargs: Any) -> str:
    """The text a model emits (before EOS) for ``action``: the action itself, or, when the
    tokenizer is a layout view with a ``reply_text(action, **template_kwargs)`` method (a
    tool-call layout, for example :class:`multiturn_envs.rl.tool_format.ToolLayoutTokenizer`),
    what that returns under the same template variables as the prompts.

    Kept off the :class:`ChatTokenizer` protocol so plain tokenizers need nothing new.
    """
    render = getattr(tokenizer, "reply_text", None)
    return action if render is None else str(render(action, **template_kwargs))


@dataclass
class Prompt:
    """The token ids to generate from for one request, and how they were built.

    Attributes:
        token_ids: the whole prompt.
        conversation: the chat messages it renders (system message included).
        delta_start: where the ids new to this turn begin (0 when not a continuation).
        continued: whether it extends the episode's previous prompt + completion token for token.
    """

    token_ids: list[int]
    conversation: list[dict[str, Any]]
    delta_start: int = 0
    continued: bool = False
    tools: tuple[Tool, ...] = ()
    text: str | None = None  # the template's rendering of ``conversation`` (generation prompt on)


@dataclass
class _Ledger:
    """What an episode's next prompt continues: the conversation and ids up to the last action.

    ``context_text``: the template's rendering of ``conversation[:-1]`` with the generation
    prompt (the last prompt's text), when known: the next turn then renders twice, not thrice.
    """

    conversation: list[dict[str, Any]]
    token_ids: list[int]
    closed_by_eos: bool
    tools: tuple[Tool, ...] = ()
    context_text: str | None = None


class _EncodeCache:
    """Token ids of recently encoded texts, least recently used dropped first.

    Why: the K samples of a task start from the same rendered prompt, and turns repeat the same
    observations, so most of a run's ``encode`` calls (the largest Python cost of a turn: a
    first FrozenLake prompt is ~1,400 ids, 2 ms) re-encode a text already seen. Encoding is a
    pure function of the text, so a hit is exact. Bounded by the ids held (``max_ids``), not
    the number of texts; a text longer than a quarter of that is never kept.
    """

    def __init__(self, max_ids: int = 1 << 18) -> None:
        self.max_ids = max_ids
        self._held = 0
        self._ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    def get(self, text: str, encode: Callable[[str], list[int]]) -> list[int]:
        known = self._ids.get(text)
        if known is not None:
            self._ids.move_to_end(text)
            return list(known)
        ids = [int(t) for t in encode(text)]
        if len(ids) <= self.max_ids // 4:
            self._ids[text] = tuple(ids)
            self._held += len(ids)
            while self._held > self.max_ids:
                _, dropped = self._ids.popitem(last=False)
                self._held -= len(dropped)
        return ids


@dataclass
class Completion:
    """One generated reply, as a backend hands it to :meth:`ChatPrompter.finish`."""

    token_ids: list[int]
    logprobs: list[float] | None
    text: str
    finish_reason: str
    meta: dict[str, Any] = field(default_factory=dict)


class ChatPrompter:
    """Renders episodes with a model's chat template and keeps each episode's token ids.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        system_prompt: ``None``: the env's ``system_prompt()`` or :data:`DEFAULT_SYSTEM_PROMPT`;
            a string: that; ``""``: no system message.
        chat_template_kwargs: extra template variables (``{"enable_thinking": False}``).
        extractor: raw completion -> action (default :class:`ActionExtractor`).
        fold_system: put the system prompt at the top of the first user message, for templates
            without a system role.
        max_episodes: episodes whose ids are kept (least recently used are dropped; a dropped
            episode is re-rendered once and continues incrementally from there).
        tools: offer each request's env tools and read tool calls (module docstring);
            ``tool_parser`` names the parser (``"hermes"``: Hermes/Qwen ``<tool_call>`` JSON).
    """

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        system_prompt: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        extractor: Callable[[str], str] | None = None,
        fold_system: bool = False,
        max_episodes: int = 65536,
        tools: bool = False,
        tool_parser: str = "hermes",
    ) -> None:
        if tool_parser != "hermes":
            raise ValueError(f"tool_parser must be 'hermes', got {tool_parser!r}")
        if getattr(tokenizer, "chat_template", "") is None:
            raise ValueError("the tokenizer has no chat template; set tokenizer.chat_template")
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.extractor = extractor or ActionExtractor()
        self.fold_system = fold_system
        self.max_episodes = max_episodes
        self.tools = tools
        self.tool_parser = tool_parser
        self._native: bool | None = None
        self._replies: dict[str, str] = {}
        self._ledgers: OrderedDict[str, _Ledger] = OrderedDict()
        self._encoded = _EncodeCache()
        self._eos_text: tuple[str | None] | None = None

    # -------------------------------------------------------------- conversation and template
    def system_for(self, request: TurnRequest) -> str:
        """The system prompt of ``request``'s episode."""
        return system_prompt_for(request, self.system_prompt, self.tools)

    @property
    def native_tools(self) -> bool:
        """Whether the chat template renders tools itself (else the Hermes text layout)."""
        if self._native is None:
            self._native = renders_tools_natively(self.tokenizer, **self.chat_template_kwargs)
        return self._native

    def conversation(self, request: TurnRequest) -> list[dict[str, Any]]:
        """The chat messages a model sees for ``request`` (system message first)."""
        return self.layout(request.messages, self.system_for(request), request.tools)

    def layout(
        self, messages: Sequence[Mapping[str, str]], system: str, tools: Sequence[Tool] = ()
    ) -> list[dict[str, Any]]:
        """An env's history as this model's chat: the tool layout when tools are on."""
        if self.tools:
            return tool_conversation(
                messages, system, tools, native=self.native_tools, fold_system=self.fold_system
            )
        return build_conversation(messages, system, self.fold_system)

    def render(
        self,
        conversation: Sequence[Mapping[str, Any]],
        generation_prompt: bool,
        tools: Sequence[Tool] = (),
    ) -> str:
        """The template's text for ``conversation`` (with ``tools`` when the template renders
        them: with the Hermes layout they are already in the system message)."""
        extra: dict[str, Any] = dict(self.chat_template_kwargs)
        if self.tools and tools and self.native_tools:
            extra["tools"] = [t.openai() for t in tools]
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in conversation],
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **extra,
        )
        if not isinstance(text, str):
            raise TypeError(f"apply_chat_template returned {type(text).__name__}, not str")
        return text

    def _reply_text(self, message: Mapping[str, Any], tools: Sequence[Tool]) -> str:
        """The template's text of an assistant ``message`` (up to its EOS): the action itself,
        or, for a ``tool_calls`` message, how the template renders the call."""
        if "tool_calls" not in message:
            return reply_text_of(
                self.tokenizer, str(message["content"]), **self.chat_template_kwargs
            )
        key = repr((message, tools))
        known = self._replies.get(key)
        if known is not None:
            return known
        context = [{"role": "user", "content": "x"}]
        prompt = self.render(context, True, tools)
        full = self.render([*context, dict(message)], False, tools)
        if not full.startswith(prompt):
            raise ValueError("the chat template does not render the context as a prefix")
        reply = full[len(prompt) :]
        eos = self.eos_text()
        if eos and eos in reply:
            reply = reply[: reply.index(eos)]
        if len(self._replies) < 65536:
            self._replies[key] = reply
        return reply

    def encode(self, text: str) -> list[int]:
        """Ids of template text (special tokens are in the text, so none are added); recent
        texts come from a bounded cache (:class:`_EncodeCache`)."""
        return self._encoded.get(text, self._encode_uncached)

    def _encode_uncached(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def eos_text(self) -> str | None:
        """The EOS token's text (looked up once: it is asked for every turn)."""
        if self._eos_text is None:
            eos = self.tokenizer.eos_token_id
            text = None if eos is None else str(self.tokenizer.convert_ids_to_tokens(int(eos)))
            self._eos_text = (text,)
        return self._eos_text[0]

    # -------------------------------------------------------------- prompts
    def prompt(self, request: TurnRequest) -> Prompt:
        """The prompt of ``request``, continuing its episode's kept ids when it can."""
        conversation = self.conversation(request)
        tools = tuple(request.tools) if self.tools else ()
        ledger = self._ledgers.get(request.episode_id) if request.episode_id else None
        if ledger is not None and ledger.tools == tools:
            continued = self._continuation(ledger, conversation)
            if continued is not None:
                delta, text = continued
                start = len(ledger.token_ids)
                ids = ledger.token_ids + self.encode(delta)
                return Prompt(ids, conversation, start, True, tools, text)
        text = self.render(conversation, True, tools)
        return Prompt(self.encode(text), conversation, tools=tools, text=text)

    def _continuation(
        self, ledger: _Ledger, conversation: list[dict[str, Any]]
    ) -> tuple[str, str] | None:
        """The text that follows the kept ids and the whole prompt's text, or ``None`` when the
        episode cannot continue them.

        The text that follows is the template's close of the last assistant turn (minus the EOS
        the model already generated) plus the newly rendered messages and the generation
        prompt. ``None`` when the conversation does not extend the kept one with new
        non-assistant messages, or when the template does not render history as a prefix
        (templates that rewrite it).
        """
        old = ledger.conversation
        if len(conversation) <= len(old) or conversation[: len(old)] != old:
            return None
        if any(m["role"] == "assistant" for m in conversation[len(old) :]):
            return None
        tools = ledger.tools
        before = ledger.context_text
        if before is None:
            before = self.render(old[:-1], True, tools)
        closed = self.render(old, False, tools)
        after = self.render(conversation, True, tools)
        content = self._reply_text(old[-1], tools)
        if not closed.startswith(before + content) or not after.startswith(closed):
            return None
        tail = closed[len(before) + len(content) :]
        eos = self.eos_text()
        if ledger.closed_by_eos and eos and tail.startswith(eos):
            tail = tail[len(eos) :]
        return tail + after[len(closed) :], after

    # -------------------------------------------------------------- replies
    def finish(
        self,
        request: TurnRequest,
        prompt: Prompt,
        completion: Completion,
        keep: bool = True,
        read: tuple[str, list[ToolCall] | None] | None = None,
    ) -> Reply:
        """The :class:`Reply` for ``completion``; with ``keep`` its ids continue the episode.

        ``Reply.text`` is the extracted action (``read``: an action and its calls already read
        by another tool parser), ``Reply.token_ids``/``logprobs`` are the generated ids and
        their raw log-probs, and ``meta`` holds what rebuilds the exact token sequence:
        ``prompt_delta_ids`` (the prompt ids new to this turn: all of them when
        ``prompt_continued`` is false), ``prompt_len``, ``raw_text`` and ``finish_reason``.
        """
        if read is not None:  # the calls were read by another parser (verl's)
            action, calls = read
            if calls is None:
                action, calls = self.extractor(action), []
        else:
            action, calls = self.read_completion(completion.text)
        eos = self.tokenizer.eos_token_id
        closed_by_eos = (
            bool(completion.token_ids) and eos is not None and (completion.token_ids[-1] == eos)
        )
        if keep and request.episode_id:
            context_text: str | None = None
            if self.tools:  # the layout of the history as the env will hold it next turn
                played = [*request.messages, {"role": "assistant", "content": action}]
                conversation = self.layout(played, self.system_for(request), prompt.tools)
            else:  # the prompt's conversation and one more message: its text is the context's
                conversation = [*prompt.conversation, {"role": "assistant", "content": action}]
                context_text = prompt.text
            self._ledgers[request.episode_id] = _Ledger(
                conversation=conversation,
                token_ids=prompt.token_ids + list(completion.token_ids),
                closed_by_eos=closed_by_eos,
                tools=prompt.tools,
                context_text=context_text,
            )
            self._ledgers.move_to_end(request.episode_id)
            while len(self._ledgers) > self.max_episodes:
                self._ledgers.popitem(last=False)
        meta = {
            "raw_text": completion.text,
            "finish_reason": completion.finish_reason,
            "prompt_len": len(prompt.token_ids),
            "prompt_continued": prompt.continued,
            "prompt_delta_ids": prompt.token_ids[prompt.delta_start :],
            **completion.meta,
        }
        return Reply(
            text=action,
            token_ids=list(completion.token_ids),
            logprobs=None
            if completion.logprobs is None
            else [float(x) for x in completion.logprobs],
            meta=meta,
            tool_calls=calls,
            usage=TokenUsage(len(prompt.token_ids), len(completion.token_ids)),
        )

    def read_completion(self, text: str) -> tuple[str, list[ToolCall] | None]:
        """The action of a completion and, with tools on, its well-formed calls (``[]`` or more;
        ``None`` in text mode): ``<think>`` removed, then the Hermes parser; a reply without a
        call goes through the extractor like any text reply."""
        if not self.tools:
            return self.extractor(text), None
        thought_out = ActionExtractor(strip_thinking=True)(text)
        action, calls = parse_hermes(thought_out)
        if calls is None:
            return self.extractor(text), []
        return action, calls

    def forget(self, episode_id: str) -> None:
        """Drop an episode's kept ids (it is over)."""
        self._ledgers.pop(episode_id, None)

    # -------------------------------------------------------------- scoring sequences
    def sequence_of(
        self,
        conversation: Sequence[Mapping[str, Any]],
        last_only: bool = False,
        tools: Sequence[Tool] = (),
    ) -> ScoringSequence:
        """A conversation's token sequence and assistant spans, built turn by turn like prompts.

        For scoring actions the scoring model did not generate (another policy's, a dataset's):
        each assistant message is tokenised on its own (as :func:`reply_text_of` writes it: the
        action, or its tool call in a tool layout) and closed with EOS, exactly as if this model
        had generated it, and the rest is rendered incrementally as in :meth:`prompt`.
        ``last_only``: one span, the last assistant message, after its whole context rendered
        at once (for templates that rewrite earlier turns, where one growing sequence fails).
        ``tools``: the env's tools, for a conversation in the tool layout (:meth:`layout`).
        """
        tools = tuple(tools) if self.tools else ()
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        ledger: _Ledger | None = None
        eos = self.tokenizer.eos_token_id
        conv = [dict(m) for m in conversation]
        assistant = [k for k, m in enumerate(conv) if m["role"] == "assistant"]
        for k, message in enumerate(conv):
            if message["role"] != "assistant" or (last_only and k != assistant[-1]):
                continue
            context = conv[:k]
            continued = self._continuation(ledger, context) if ledger is not None else None
            delta = None if continued is None else continued[0]
            ids = (
                ids + self.encode(delta)
                if delta is not None
                else self.encode(self.render(context, True, tools))
            )
            reply = self._reply_text(message, tools)
            action_ids = self.encode(reply) + ([] if eos is None else [int(eos)])
            if delta is None and spans:
                raise ValueError(
                    "this chat template rewrites earlier turns, so one token sequence cannot hold "
                    "the whole conversation; score it turn by turn"
                )
            spans.append((len(ids), len(ids) + len(action_ids)))
            ids = ids + action_ids
            ledger = _Ledger(conv[: k + 1], ids, eos is not None, tools)
        return ScoringSequence(ids, spans)
