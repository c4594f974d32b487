"""The policy protocol: map a batch of live episodes to one reply each.

The harness makes ONE call per turn for all episodes in flight, so batched backends (vLLM,
transformers, an HTTP server with many requests in flight) see the whole batch. A
:class:`TurnRequest` carries the conversation (what an LLM sees), a seed for sampling that is
unique per (run, task, sample, turn), and the live env, which only oracle baselines (expert,
noisy expert) and env-aware baselines (random over valid actions) may read. A policy must never
step or reset the env it is given.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from multiturn_envs.core import TextEnv


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One live episode asking for its next action.

    The dicts in ``messages`` are read-only: the harness passes the env's own message dicts
    (:meth:`TextEnv.message_view`) instead of copying every message of every episode each
    turn. A policy that needs to change one copies it first (``build_conversation`` does).
    ``slots=True``: one request per live episode per turn, so its construction cost counts.
    """

    messages: Sequence[dict[str, str]]
    env: TextEnv
    seed: int
    episode_id: str = ""

    @property
    def observation(self) -> str:
        return self.messages[-1]["content"] if self.messages else ""


@dataclass
class Reply:
    """A policy's reply: the text sent to the env, plus what LLM backends know about it."""

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


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
        self.name = name or getattr(fn, "__name__", "callable")

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        replies = []
        for req in requests:
            arg = req.observation if self.on == "observation" else list(req.messages)
            text = self.fn(arg)
            if not isinstance(text, str):
                raise TypeError(f"policy {self.name!r} returned {type(text).__name__}, not str")
            replies.append(Reply(text=text))
        return replies


def as_policy(obj: Any) -> Policy | AsyncPolicy:
    """Return ``obj`` if it is a policy, or adapt a plain callable."""
    if isinstance(obj, Policy | AsyncPolicy):
        return obj
    if callable(obj):
        return CallablePolicy(obj)
    raise TypeError(f"{obj!r} is neither a policy (name + act/aact) nor a callable")
