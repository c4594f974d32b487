"""The policy protocol: map a batch of live episodes to one reply each.

The harness makes ONE call per turn for all episodes in flight, so batched backends (vLLM,
transformers, an HTTP server with many requests in flight) see the whole batch. A
:class:`TurnRequest` carries the conversation (what an LLM sees), the env's system prompt and
tools at this turn (so an LLM is prompted the same wherever it runs: in this process or on a
Ray actor that has no env), a seed for sampling that is unique per (run, task, sample, turn),
and the live env, which only oracle baselines (expert, noisy expert) and env-aware baselines
(random over valid actions) may read. A policy must never step or reset the env it is given.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, runtime_checkable

from multiturn_envs.core import TextEnv
from multiturn_envs.errors import PolicyError
from multiturn_envs.tools import Tool, ToolCall

__all__ = [
    "AsyncPolicy",
    "CallablePolicy",
    "Policy",
    "PolicyCaller",
    "Reply",
    "TokenUsage",
    "TurnRequest",
    "TurnTokens",
    "as_policy",
]


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One live episode asking for its next action.

    The dicts in ``messages`` are read-only: the harness passes the env's own message dicts
    (:meth:`TextEnv.message_view`) instead of copying every message of every episode each
    turn. A policy that needs to change one copies it first (``build_conversation`` does).
    ``slots=True``: one request per live episode per turn, so its construction cost counts.
    """

    messages: Sequence[dict[str, str]]
    env: TextEnv | None
    seed: int
    episode_id: str = ""
    system_prompt: str | None = None
    """The env's ``system_prompt()`` (``None``: not given; read from ``env`` if there is one)."""
    tools: tuple[Tool, ...] = ()
    """The env's tools at this turn (``TextEnv.tools()``); a tool-calling policy offers them."""
    tool_system_prompt: str | None = None
    """The env's ``tool_system_prompt()``: what a tool-calling policy is told instead."""

    @property
    def observation(self) -> str:
        return self.messages[-1]["content"] if self.messages else ""

    def live_env(self) -> TextEnv:
        """The episode's env, for oracle and env-aware policies; a clear :class:`PolicyError`
        where the request crossed a process boundary without it (a Ray policy actor)."""
        if self.env is None:
            raise PolicyError(
                "this policy reads request.env, but with policy_placement='actor-pool' requests "
                "carry no env (it lives in the rollout worker); use policy_placement='worker' "
                "for oracle and env-aware baselines"
            )
        return self.env


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """What one reply cost in tokens: the prompt the model read and the completion it wrote.

    Every backend reports it per reply (:attr:`Reply.usage`), so that records carry tokens per
    turn and reports can price a run. ``prompt_tokens`` is the whole prompt of the call (a
    multi-turn episode pays its history again every turn, as an API bills it), not only what
    is new since the last turn. The scripted baselines read no prompt and write nothing: 0 and
    0. A backend that cannot tell (a server that reports no usage) leaves ``Reply.usage``
    ``None``, never a guess.
    """

    prompt_tokens: int
    completion_tokens: int

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "completion_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


NO_TOKENS = TokenUsage(0, 0)
"""The usage of a reply that no model produced (the scripted baselines)."""


@dataclass
class Reply:
    """A policy's reply: the text sent to the env, plus what LLM backends know about it.

    ``tool_calls``: ``None`` for a text-mode policy; for a policy given the env's tools, the
    well-formed calls it made (``text`` is then their canonical text, malformed blocks verbatim,
    or, with no call at all, the reply's text: see
    :func:`~multiturn_envs.policies.tool_layout.replies_stop` for what such a reply means).
    ``usage``: the tokens the reply cost (:class:`TokenUsage`; ``None``: the backend cannot
    tell).
    """

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    tool_calls: list[ToolCall] | None = None
    usage: TokenUsage | None = None


class TurnTokens(TypedDict, total=False):
    """What a record keeps of one LLM turn (:func:`.token_sequences.reply_tokens`).

    ``ids`` and ``logprobs`` are the generated ids and their log-probs; the other keys are set
    as far as the backend knows them (``raw_text``: the completion before action extraction).
    """

    ids: list[int]
    logprobs: list[float] | None
    prompt_delta_ids: list[int]
    prompt_continued: bool
    prompt_len: int
    finish_reason: str | None
    raw_text: str


@runtime_checkable
class Policy(Protocol):
    """Anything with a ``name`` and a batched ``act``."""

    name: str

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]: ...


@runtime_checkable
class AsyncPolicy(Protocol):
    """A policy whose backend is async (HTTP servers): ``aact`` instead of ``act``."""

    name: str

    async def aact(self, requests: Sequence[TurnRequest]) -> list[Reply]: ...


class CallablePolicy:
    """Adapts ``fn(observation) -> str`` (or ``fn(messages) -> str`` with ``on="messages"``)."""

    def __init__(
        self,
        fn: Callable[[Any], str] | Callable[[Any], Awaitable[str]],
        name: str | None = None,
        on: str = "observation",
    ) -> None:
        if on not in ("observation", "messages"):
            raise ValueError("on must be 'observation' or 'messages'")
        if inspect.iscoroutinefunction(fn):
            raise TypeError("wrap an async function in an AsyncPolicy, not CallablePolicy")
        self.fn = fn
        self.on = on
        self.name: str = name or str(getattr(fn, "__name__", "callable"))

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        replies = []
        for req in requests:
            arg = req.observation if self.on == "observation" else list(req.messages)
            text = self.fn(arg)
            if not isinstance(text, str):
                raise TypeError(f"policy {self.name!r} returned {type(text).__name__}, not str")
            replies.append(Reply(text=text))
        return replies


class PolicyCaller:
    """The one way the library calls a policy: rollouts, analyses and Ray policy actors.

    Sync policies are called directly (a policy with both ``act`` and ``aact`` is called
    through ``act``); an async policy runs on ONE event loop that this object owns for its
    lifetime (``close`` or ``with``), so that HTTP clients keep their connections between
    calls. Every call checks the protocol: one reply per request, each a :class:`Reply` or a
    plain ``str`` (adapted), with ``str`` text; a breach is a :class:`PolicyError` naming the
    policy. Not thread-safe: one caller per thread (a Ray actor serialises its calls).
    """

    def __init__(self, policy: Policy | AsyncPolicy) -> None:
        if not isinstance(policy, Policy | AsyncPolicy):
            raise TypeError(f"{policy!r} is not a Policy or AsyncPolicy (see policies/base.py)")
        self.policy = policy
        self._sync = policy if isinstance(policy, Policy) else None
        self._async = policy if self._sync is None and isinstance(policy, AsyncPolicy) else None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def is_async(self) -> bool:
        """Whether the policy is async (its calls run on this caller's event loop)."""
        return self._async is not None

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run ``coro`` on this caller's event loop (the one its async policy's clients live
        on): the harness's async path awaits the policy and the envs' steps there."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    async def acall(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        """:meth:`__call__` from inside this caller's loop (an async policy is awaited)."""
        if self._async is not None:
            return self._checked(requests, await self._async.aact(requests))
        assert self._sync is not None
        return self._checked(requests, self._sync.act(requests))

    def __call__(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        if self._sync is not None:
            raw: Sequence[Reply | str] = self._sync.act(requests)
        else:
            assert self._async is not None
            raw = self.run(self._async.aact(requests))
        return self._checked(requests, raw)

    def _checked(self, requests: Sequence[TurnRequest], raw: Sequence[Reply | str]) -> list[Reply]:
        if len(raw) != len(requests):
            raise PolicyError(
                f"policy {self.name!r} returned {len(raw)} replies for {len(requests)} requests"
            )
        replies = []
        for item in raw:
            reply: object = Reply(item) if isinstance(item, str) else item  # bare strings: fine
            text = reply.text if isinstance(reply, Reply) else reply
            if not isinstance(reply, Reply) or not isinstance(text, str):
                raise PolicyError(f"policy {self.name!r} replied {type(text).__name__}, not str")
            if reply.usage is not None and not isinstance(reply.usage, TokenUsage):
                raise PolicyError(
                    f"policy {self.name!r} gave a usage of {type(reply.usage).__name__}, not "
                    "TokenUsage (or None)"
                )
            replies.append(reply)
        return replies

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def __enter__(self) -> PolicyCaller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def as_policy(obj: Any) -> Policy | AsyncPolicy:
    """Return ``obj`` if it is a policy, or adapt a plain callable."""
    if isinstance(obj, Policy | AsyncPolicy):
        return obj
    if callable(obj):
        return CallablePolicy(obj)
    raise TypeError(f"{obj!r} is neither a policy (name + act/aact) nor a callable")
