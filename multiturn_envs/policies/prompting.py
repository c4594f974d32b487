"""The chat-prompting layer that every LLM backend shares.

One place decides how an episode becomes model input and how model output becomes an action, so
that the transformers, vLLM and HTTP backends prompt identically and what is *scored* later is
exactly what was *generated*:

* **Conversation.** ``TurnRequest.messages`` (the env's observations and the actions it
  received) behind one system message: an explicit ``system_prompt``, else the env's
  ``system_prompt()``, else :data:`DEFAULT_SYSTEM_PROMPT`.
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
* **Action extraction.** The env parses actions itself; extraction only removes what is not
  meant for the env (``<think>`` blocks, surrounding whitespace, or everything but a regex
  group). Junk stays junk and the env answers it with a parse error.
* **Tools** (``tools=True``): the env's tools (``TurnRequest.tools``) are rendered through the
  model's chat template (or in the Hermes wording for templates that ignore tools), the
  history in the tool layout, and the completion read with the Hermes/Qwen parser
  (:mod:`multiturn_envs.policies.tool_layout`): the action is the canonical text of the calls.
* **Sampling settings and seeds** (:class:`Sampling`, :func:`sample_seed_base`), the same for
  all backends.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

import numpy as np

from multiturn_envs.policies.base import Reply, TurnRequest, TurnTokens
from multiturn_envs.policies.tool_layout import (
    parse_hermes,
    renders_tools_natively,
    tool_conversation,
)
from multiturn_envs.tools import Tool, ToolCall

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent acting in a multi-turn text environment. Each user message is the "
    "environment's observation. Reply with your next action only, in the format the environment "
    "asks for."
)

SEED_BITS = 62
"""Per-sample seeds are ``base + i`` with a 62-bit ``base``, so they fit a signed 64-bit int."""

FinishReason = Literal["stop", "length"]


# ---------------------------------------------------------------------------------- sampling
@dataclass(frozen=True)
class Sampling:
    """Sampling settings shared by every backend.

    Attributes:
        temperature: ``0`` is greedy; otherwise logits are divided by it before sampling.
        top_p: nucleus mass kept (``1.0``: off).
        top_k: most likely tokens kept (``0``: off).
        max_tokens: the most tokens one reply may have (always set: vLLM's default is 16).
        stop: strings that end a reply; the reply's text is cut before the first one.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 is off), got {self.top_k!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        object.__setattr__(self, "stop", tuple(self.stop))
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")


def sample_seed_base(seed: int) -> int:
    """The seed of sample 0 of a request with seed ``seed``; sample ``i`` uses ``base + i``.

    vLLM gives child ``i`` of an ``n``-sample request the seed ``seed + i``, so two requests whose
    seeds differ by less than ``n`` would share samples. Hashing the request seed (unique per run,
    task, sample and turn in the harness) to a 62-bit base makes such overlaps as unlikely as a
    hash collision, while ``n`` samples of one request still come from one backend call.
    """
    if seed < 0:
        raise ValueError(f"seeds are non-negative ints, got {seed!r}")
    word = np.random.SeedSequence(int(seed)).generate_state(1, dtype=np.uint64)[0]
    return int(word) >> (64 - SEED_BITS)


# ---------------------------------------------------------------------------------- actions
class ActionExtractor:
    """Turn a raw completion into the action sent to the env.

    Args:
        pattern: optional regex; when it matches, the action is its last match (group 1 when the
            pattern has a group). When it does not match, the whole (cleaned) text is sent, so the
            env reports the malformed action instead of the policy hiding it.
        strip_thinking: drop ``<think>...</think>`` blocks; an unclosed ``<think>`` (the budget ran
            out while thinking) leaves no action.
    """

    _THINK = re.compile(r"<think>.*?</think>", re.DOTALL)

    def __init__(self, pattern: str | None = None, strip_thinking: bool = True) -> None:
        self.pattern = re.compile(pattern, re.DOTALL) if pattern else None
        self.strip_thinking = strip_thinking

    def __call__(self, text: str) -> str:
        if self.strip_thinking:
            text = self._THINK.sub("", text)
            if "<think>" in text:
                text = text[: text.index("<think>")]
            text = text.replace("</think>", "")
        if self.pattern is not None:
            matches = list(self.pattern.finditer(text))
            if matches:
                last = matches[-1]
                text = last.group(1) if self.pattern.groups else last.group(0)
        return text.strip()


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut before the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


# ---------------------------------------------------------------------------------- conversation
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


@dataclass
class _Ledger:
    """What an episode's next prompt continues: the conversation and ids up to the last action."""

    conversation: list[dict[str, Any]]
    token_ids: list[int]
    closed_by_eos: bool
    tools: tuple[Tool, ...] = ()


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
        """Ids of template text (special tokens are in the text, so none are added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def eos_text(self) -> str | None:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            return None
        return str(self.tokenizer.convert_ids_to_tokens(int(eos)))

    # -------------------------------------------------------------- prompts
    def prompt(self, request: TurnRequest) -> Prompt:
        """The prompt of ``request``, continuing its episode's kept ids when it can."""
        conversation = self.conversation(request)
        tools = tuple(request.tools) if self.tools else ()
        ledger = self._ledgers.get(request.episode_id) if request.episode_id else None
        if ledger is not None and ledger.tools == tools:
            delta = self._continuation(ledger, conversation)
            if delta is not None:
                start = len(ledger.token_ids)
                ids = ledger.token_ids + self.encode(delta)
                return Prompt(ids, conversation, start, True, tools)
        return Prompt(
            self.encode(self.render(conversation, True, tools)), conversation, tools=tools
        )

    def _continuation(self, ledger: _Ledger, conversation: list[dict[str, Any]]) -> str | None:
        """The text that follows the kept ids, or ``None`` when the episode cannot continue them.

        It is the template's close of the last assistant turn (minus the EOS the model already
        generated) plus the newly rendered messages and the generation prompt. ``None`` when the
        conversation does not extend the kept one with new non-assistant messages, or when the
        template does not render history as a prefix (templates that rewrite it).
        """
        old = ledger.conversation
        if len(conversation) <= len(old) or conversation[: len(old)] != old:
            return None
        if any(m["role"] == "assistant" for m in conversation[len(old) :]):
            return None
        tools = ledger.tools
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
        return tail + after[len(closed) :]

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
            if self.tools:  # the layout of the history as the env will hold it next turn
                played = [*request.messages, {"role": "assistant", "content": action}]
                conversation = self.layout(played, self.system_for(request), prompt.tools)
            else:
                conversation = [*prompt.conversation, {"role": "assistant", "content": action}]
            self._ledgers[request.episode_id] = _Ledger(
                conversation=conversation,
                token_ids=prompt.token_ids + list(completion.token_ids),
                closed_by_eos=closed_by_eos,
                tools=prompt.tools,
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
            delta = self._continuation(ledger, context) if ledger is not None else None
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


# ---------------------------------------------------------------------------------- trajectories
@dataclass
class ScoringSequence:
    """Token ids and the ``[start, end)`` spans whose log-probs are wanted."""

    token_ids: list[int]
    spans: list[tuple[int, int]]

    def __post_init__(self) -> None:
        self.token_ids = [int(t) for t in self.token_ids]
        self.spans = [(int(a), int(b)) for a, b in self.spans]
        for a, b in self.spans:
            if not 1 <= a <= b <= len(self.token_ids):
                raise ValueError(
                    f"span {(a, b)} must satisfy 1 <= start <= end <= {len(self.token_ids)} "
                    "(the first token has no log-prob)"
                )


def trajectory_sequences(replies: Sequence[Reply]) -> list[ScoringSequence]:
    """The exact token sequences of one episode's replies, one span per reply.

    Consecutive continued turns form one sequence (score it in one request); a turn whose prompt
    was re-rendered (``prompt_continued`` false after the first) starts a new one. Each span is
    the reply's generated ids, so scoring it under the generating model gives back
    ``reply.logprobs``.
    """
    sequences: list[ScoringSequence] = []
    for reply in replies:
        if reply.token_ids is None or "prompt_delta_ids" not in reply.meta:
            raise ValueError("a reply without token ids cannot be scored exactly; use sequence_of")
        delta = [int(t) for t in reply.meta["prompt_delta_ids"]]
        if not sequences or not reply.meta.get("prompt_continued", False):
            sequences.append(ScoringSequence([], []))
        seq = sequences[-1]
        seq.token_ids.extend(delta)
        expected = reply.meta.get("prompt_len")
        if expected is not None and int(expected) != len(seq.token_ids):
            raise ValueError(
                f"reply prompt_len {expected} != {len(seq.token_ids)} rebuilt ids: the replies are "
                "not the consecutive turns of one episode"
            )
        start = len(seq.token_ids)
        seq.token_ids.extend(int(t) for t in reply.token_ids)
        seq.spans.append((start, len(seq.token_ids)))
    for seq in sequences:
        seq.__post_init__()
    return sequences


# ---------------------------------------------------------------------------------- records
TOKEN_META_KEYS = (
    "prompt_delta_ids",
    "prompt_continued",
    "prompt_len",
    "finish_reason",
    "raw_text",
)
"""The :class:`Reply` ``meta`` keys a trajectory record keeps per turn (``turn_tokens``): with
the generated ids they rebuild the exact token sequence (:func:`trajectory_sequences`)."""


def reply_tokens(reply: Reply) -> TurnTokens | None:
    """What a record keeps of ``reply``'s tokens (``None`` when the policy gave no ids).

    ``ids`` and ``logprobs`` are the generated ids and their log-probs; the other keys are
    :data:`TOKEN_META_KEYS` as far as the backend set them.
    """
    if reply.token_ids is None:
        return None
    tokens: dict[str, Any] = {
        "ids": [int(t) for t in reply.token_ids],
        "logprobs": None if reply.logprobs is None else [float(x) for x in reply.logprobs],
    }
    for key in TOKEN_META_KEYS:
        if key in reply.meta:
            tokens[key] = reply.meta[key]
    return cast(TurnTokens, tokens)


def replies_from_tokens(
    actions: Sequence[str], turn_tokens: Sequence[Mapping[str, Any] | None]
) -> list[Reply]:
    """The replies of a recorded trajectory, rebuilt from its ``actions`` and ``turn_tokens``.

    The inverse of :func:`reply_tokens`, so that ``trajectory_sequences(replies_from_tokens(...))``
    gives the exact sequences the model generated. A turn without ids is a ``ValueError``: it
    cannot be scored exactly (score its text with ``ChatPrompter.sequence_of`` instead).
    """
    if len(actions) != len(turn_tokens):
        raise ValueError(f"{len(actions)} actions but {len(turn_tokens)} turn_tokens entries")
    replies = []
    for t, (action, tokens) in enumerate(zip(actions, turn_tokens), start=1):
        if tokens is None or "ids" not in tokens:
            raise ValueError(f"turn {t} has no recorded token ids")
        logprobs = tokens.get("logprobs")
        replies.append(
            Reply(
                text=str(action),
                token_ids=[int(x) for x in tokens["ids"]],
                logprobs=None if logprobs is None else [float(x) for x in logprobs],
                meta={k: tokens[k] for k in TOKEN_META_KEYS if k in tokens},
            )
        )
    return replies
