"""Any OpenAI-compatible server (vLLM, SGLang, ...) as an async batched policy, over httpx.

All episodes of a turn go out at once as separate HTTP requests, at most ``max_concurrency`` in
flight (the server batches them itself). Transient failures (connection refused or reset,
timeouts, 408/429/5xx) are retried with exponential backoff and jitter; what cannot succeed is
reported clearly: :class:`ServerUnavailable` for a dead server, :class:`ModelNotServed` (with
the served ids) for a wrong model name, :class:`ServerError` for a request the server rejects.

Two modes:

* ``mode="chat"`` (any server): ``/v1/chat/completions`` with the conversation; the server applies
  the chat template. Token ids and log-probs come back when the server provides them (vLLM's
  ``return_token_ids``, the standard ``logprobs``), but each turn is re-rendered server-side.
* ``mode="completions"`` (servers that take token-id prompts, e.g. vLLM): the prompt is built
  locally by :class:`~multiturn_envs.policies.prompting.ChatPrompter` from kept ids and sent as
  ids to ``/v1/completions``, so what is generated, kept and later scored is token-identical,
  as with the offline backends.

With ``tools=True`` the env's tools go along: in chat mode as the request's ``tools`` (the
server's template renders them; ``tool_choice`` passes through) with the history in OpenAI's
tool-call layout, and the reply's ``tool_calls`` are read back (a reply whose ``content``
holds ``<tool_call>`` blocks, from a server without a tool parser, is read with the Hermes
parser); in completions mode the local prompter renders and parses them as the offline
backends do. ``tool_prompt="hermes"`` (chat mode) writes the tools into the system message
instead, for served templates that ignore ``tools``.

``server="vllm"`` sends vLLM's extra sampling fields (``top_k``, ``return_token_ids``,
``chat_template_kwargs``); ``server="generic"`` sends only standard fields and, by default,
asks for no log-probs and makes ``n`` separate requests (some servers reject ``n`` and
``logprobs``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

from multiturn_envs.policies.action_extractor import ActionExtractor
from multiturn_envs.policies.base import Reply, TokenUsage, TurnRequest
from multiturn_envs.policies.conversation import build_conversation, system_prompt_for
from multiturn_envs.policies.prompting import ChatPrompter, ChatTokenizer, Completion
from multiturn_envs.policies.response_cache import ResponseCache, open_cache
from multiturn_envs.policies.sampling import Sampling, cut_at_stop, sample_seed_base
from multiturn_envs.policies.tool_layout import parse_hermes, tool_conversation
from multiturn_envs.tools import ToolCall, call_from_openai, within_bounds

T = TypeVar("T")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class ServerUnavailable(ConnectionError):
    """No OpenAI-compatible server answered at the URL (after all retries)."""


class ModelNotServed(LookupError):
    """The server is up but does not serve the requested model."""


class ServerError(RuntimeError):
    """The server answered with an error that retrying will not fix (or retries ran out)."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code (refuses inside a running loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    close = getattr(coro, "close", None)
    if close is not None:
        close()  # never awaited: close it so Python does not warn
    raise RuntimeError("called from a running event loop: await the async method (aact) instead")


MAX_RESPONSE_BYTES = 1 << 30
"""The largest answer body read (:attr:`OpenAIClient.max_response_bytes`): far above what
``n`` replies with per-token log-probs take, and a bound on a server or proxy gone wrong."""


def _shape(where: str, value: Any, wanted: str) -> ServerError:
    got = "null" if value is None else type(value).__name__
    return ServerError(
        f"the server's answer is not an OpenAI completion: {where} is {got}, not {wanted}"
    )


def as_object(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else a :class:`ServerError` naming ``where``."""
    if not isinstance(value, Mapping):
        raise _shape(where, value, "an object")
    return value


def as_list(value: Any, where: str) -> list[Any]:
    """``value`` when it is a JSON array, else a :class:`ServerError` naming ``where``."""
    if not isinstance(value, list):
        raise _shape(where, value, "an array")
    return value


def as_text(value: Any, where: str) -> str:
    """``value`` when it is a string (``null``: ``""``), else a :class:`ServerError`."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _shape(where, value, "a string")
    return value


def as_numbers(value: Any, where: str, kind: type[int] | type[float]) -> list[Any] | None:
    """A JSON array of numbers as ints or floats (``null``: ``None``), else a
    :class:`ServerError` (a string or a nested array where a number belongs included)."""
    if value is None:
        return None
    out = []
    for i, item in enumerate(as_list(value, where)):
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise _shape(f"{where}[{i}]", item, "a number")
        if kind is int and not (isinstance(item, int) or float(item).is_integer()):
            raise _shape(f"{where}[{i}]", item, "an integer")
        out.append(kind(item))
    return out


def echoed_logprobs(data: Any) -> list[float | None]:
    """The prompt's log-probs of an ``echo`` completion (``null`` for the first token), each
    part of the answer's shape checked (a :class:`ServerError` names what is wrong)."""
    choices = as_list(as_object(data, "it").get("choices"), "choices")
    if not choices:
        raise ServerError("the server's echo answer has no choice")
    logprobs = as_object(as_object(choices[0], "choices[0]").get("logprobs"), "logprobs")
    out: list[float | None] = []
    for i, x in enumerate(as_list(logprobs.get("token_logprobs"), "logprobs.token_logprobs")):
        if x is not None and (isinstance(x, bool) or not isinstance(x, int | float)):
            raise _shape(f"logprobs.token_logprobs[{i}]", x, "a number")
        out.append(None if x is None else float(x))
    return out


def _finish_reason(value: Any) -> str | None:
    """The finish reason as text (a record keeps it): what is not a short string is dropped."""
    return value[:100] if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    """A token count from a server's answer (a non-negative int), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_of(
    data: Mapping[str, Any], prompt_ids: list[int] | None, token_ids: list[int] | None
) -> TokenUsage | None:
    """The tokens one choice of ``data`` cost, as far as the answer tells.

    The prompt: the answer's ``usage.prompt_tokens`` (the prompt is shared by its choices),
    else the length of the returned prompt ids. The completion: the choice's own ids, else
    ``usage.completion_tokens`` when the answer holds this one choice only (with ``n`` choices
    it is their sum). ``None`` when either is unknown: a count is never guessed.
    """
    usage = data.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    prompt = _count(usage.get("prompt_tokens"))
    if prompt is None and prompt_ids is not None:
        prompt = len(prompt_ids)
    completion = None if token_ids is None else len(token_ids)
    choices = data.get("choices")
    if completion is None and isinstance(choices, list) and len(choices) == 1:
        completion = _count(usage.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    return TokenUsage(prompt, completion)


def normalise_base_url(base_url: str) -> str:
    """``http://host:port`` or ``.../v1`` (with or without a slash) -> ``.../v1``."""
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


class OpenAIClient:
    """A small async JSON client with bounded concurrency, retries and clear errors.

    The httpx client and the semaphore belong to the event loop they were made in; a call from
    another loop (each synchronous ``act`` runs its own) makes fresh ones.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_concurrency: int = 32,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        jitter_seed: int = 0,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = normalise_base_url(base_url)
        self.model = model
        self.api_key = api_key
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_response_bytes = MAX_RESPONSE_BYTES
        self._rng = np.random.default_rng(jitter_seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._http: Any = None
        self._semaphore: asyncio.Semaphore | None = None
        self._checked = False

    def _bind(self) -> tuple[Any, asyncio.Semaphore]:
        import httpx

        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._http is None or self._semaphore is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            limits = httpx.Limits(max_connections=self.max_concurrency)
            self._http = httpx.AsyncClient(
                timeout=self.timeout_s, headers=headers, limits=limits, trust_env=False
            )
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
            self._loop = loop
        return self._http, self._semaphore

    async def aclose(self) -> None:
        if self._http is not None and self._loop is asyncio.get_running_loop():
            await self._http.aclose()
        self._http, self._semaphore, self._loop = None, None, None

    def _delay(self, attempt: int) -> float:
        base = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        return float(base * (1.0 + 0.25 * self._rng.random()))

    async def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One JSON request with retries; returns the decoded JSON body."""
        import httpx

        http, semaphore = self._bind()
        url = f"{self.base_url}{path}"
        started = time.monotonic()
        last: str = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._delay(attempt - 1))
            try:
                async with semaphore, http.stream(method, url, json=body) as response:
                    content = await self._read_body(response, url)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            status = int(response.status_code)
            head = content[:500].decode("utf-8", "replace")
            if status in RETRY_STATUS:
                last = f"HTTP {status}: {head[:300]}"
                continue
            if status >= 400:
                self._raise_for(status, head, body)
            try:
                return json.loads(content)
            except RecursionError:
                raise ServerError(f"{url} answered JSON nested too deeply to read") from None
            except ValueError as exc:
                raise ServerError(f"{url} answered non-JSON: {head[:200]!r}") from exc
        elapsed = time.monotonic() - started
        attempts = self.max_retries + 1
        if last.startswith("HTTP"):
            raise ServerError(f"{url} kept failing ({attempts} attempts, {elapsed:.1f} s): {last}")
        raise ServerUnavailable(
            f"no OpenAI-compatible server answers at {self.base_url} ({attempts} attempts over "
            f"{elapsed:.1f} s; last error {last}). Is it running, and is the URL right?"
        )

    async def _read_body(self, response: Any, url: str) -> bytes:
        """The response's body, read within :attr:`max_response_bytes` and ``timeout_s`` (a
        server or proxy that never ends a body, or trickles it, is refused, not waited on)."""
        body = bytearray()

        async def read() -> None:
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > self.max_response_bytes:
                    raise ServerError(
                        f"{url} answered with more than {self.max_response_bytes:,} bytes "
                        "(max_response_bytes)"
                    )

        try:
            await asyncio.wait_for(read(), self.timeout_s)
        except asyncio.TimeoutError:
            raise ServerError(
                f"{url} did not finish its answer within {self.timeout_s:g} s"
            ) from None
        return bytes(body)

    def _raise_for(self, status: int, text: str, body: Mapping[str, Any] | None) -> None:
        if status == 404 and body is not None and "model" in text.lower():
            raise ModelNotServed(f"{self.base_url} does not serve model {self.model!r}: {text}")
        if status in (401, 403):
            raise ServerError(f"{self.base_url} refused the credentials (HTTP {status}): {text}")
        raise ServerError(f"{self.base_url} rejected the request (HTTP {status}): {text}")

    async def post(self, path: str, body: Mapping[str, Any]) -> Any:
        return await self.request("POST", path, body)

    async def served_models(self) -> list[str]:
        data = as_object(await self.request("GET", "/models"), "the /models answer")
        models = as_list(data.get("data", []), "the /models answer's data")
        return [str(as_object(m, "a model entry").get("id"))[:200] for m in models]

    async def check_model(self) -> None:
        """Fail fast, with the served ids, when the model name is wrong (checked once)."""
        if self._checked:
            return
        try:
            served = await self.served_models()
        except ServerError:
            return  # servers without /v1/models: the first real request will tell
        if served and self.model not in served:
            raise ModelNotServed(
                f"{self.base_url} does not serve model {self.model!r}; it serves {served}"
            )
        self._checked = True


class OpenAIPolicy:
    """An LLM behind an OpenAI-compatible HTTP server, as an :class:`AsyncPolicy` (``aact``).

    Args:
        base_url: e.g. ``http://127.0.0.1:8000`` (``/v1`` is added when missing).
        model: the served model id.
        sampling: temperature, top-p, top-k (vLLM only), max tokens, stop strings.
        mode: ``"chat"`` or ``"completions"`` (token-id prompts built locally; needs
            ``tokenizer``); see the module docstring.
        tokenizer: the model's tokenizer (``mode="completions"``).
        server: ``"vllm"`` (send vLLM's extra fields) or ``"generic"`` (standard fields only).
        logprobs: ask for the sampled tokens' log-probs (default: on for vLLM).
        native_n: send ``n`` in one request (default: on for vLLM); else ``n`` requests.
        system_prompt, chat_template_kwargs, fold_system, extractor: as for the other backends.
        max_concurrency, timeout_s, max_retries, api_key: transport (see :class:`OpenAIClient`).
        extra_body: more fields merged into every request body.
        tools: offer each request's env tools and read the calls (module docstring).
        tool_choice: OpenAI's ``tool_choice`` (``"auto"``, ``"required"``, a named function);
            ``None``: not sent (the server's default).
        tool_prompt: ``"native"`` (send ``tools=``) or ``"hermes"`` (tools in the system
            message, calls read from the text), chat mode only.
        cache: a :class:`~.response_cache.ResponseCache` (or its file): a request body sent
            before is answered with the server's answer then (default: none).
        revision: what the served model is, beyond its id, in the cache's keys (a server may
            serve another checkpoint under the same id: name it, e.g. a commit or a date).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        sampling: Sampling | None = None,
        *,
        name: str | None = None,
        mode: Literal["chat", "completions"] = "chat",
        tokenizer: ChatTokenizer | None = None,
        server: Literal["vllm", "generic"] = "vllm",
        logprobs: bool | None = None,
        native_n: bool | None = None,
        system_prompt: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        fold_system: bool = False,
        extractor: Callable[[str], str] | None = None,
        max_concurrency: int = 32,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        api_key: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        tools: bool = False,
        tool_choice: str | Mapping[str, Any] | None = None,
        tool_prompt: Literal["native", "hermes"] = "native",
        cache: ResponseCache | str | os.PathLike[str] | None = None,
        revision: str | None = None,
    ) -> None:
        self.cache = open_cache(cache)
        self.revision = revision
        if mode not in ("chat", "completions"):
            raise ValueError(f"mode must be 'chat' or 'completions', got {mode!r}")
        if server not in ("vllm", "generic"):
            raise ValueError(f"server must be 'vllm' or 'generic', got {server!r}")
        if mode == "completions" and tokenizer is None:
            raise ValueError("mode='completions' builds token-id prompts locally: pass tokenizer=")
        if tool_prompt not in ("native", "hermes"):
            raise ValueError(f"tool_prompt must be 'native' or 'hermes', got {tool_prompt!r}")
        self.tools = tools
        self.tool_choice = tool_choice
        self.tool_prompt = tool_prompt
        self.sampling = sampling or Sampling()
        self.name = name or model
        self.mode = mode
        self.server = server
        self.logprobs = (server == "vllm") if logprobs is None else logprobs
        self.native_n = (server == "vllm") if native_n is None else native_n
        self.system_prompt = system_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.fold_system = fold_system
        self.extractor = extractor or ActionExtractor()
        self.extra_body = dict(extra_body or {})
        self.prompter = (
            ChatPrompter(
                tokenizer,
                system_prompt=system_prompt,
                chat_template_kwargs=chat_template_kwargs,
                extractor=self.extractor,
                fold_system=fold_system,
                tools=tools,
            )
            if tokenizer is not None
            else None
        )
        self.client = OpenAIClient(
            base_url,
            model,
            api_key=api_key,
            max_concurrency=max_concurrency,
            timeout_s=timeout_s,
            max_retries=max_retries,
        )

    # ------------------------------------------------------------------ policy protocol
    async def aact(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        """One reply per request, all requests in flight at once (bounded)."""
        groups = await self._respond(requests, 1, keep=True)
        return [g[0] for g in groups]

    async def asample(self, requests: Sequence[TurnRequest], n: int) -> list[list[Reply]]:
        """``n`` replies per request from its current state."""
        return await self._respond(requests, n, keep=False)

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        return run_sync(self._closing(self.aact(requests)))

    def sample(self, requests: Sequence[TurnRequest], n: int) -> list[list[Reply]]:
        return run_sync(self._closing(self.asample(requests, n)))

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _closing(self, coro: Awaitable[T]) -> T:
        try:
            return await coro
        finally:
            await self.client.aclose()

    async def _respond(
        self, requests: Sequence[TurnRequest], n: int, keep: bool
    ) -> list[list[Reply]]:
        if n < 1:
            raise ValueError("n must be >= 1")
        await self.client.check_model()
        one = self._chat if self.mode == "chat" else self._completions
        return list(await asyncio.gather(*(one(r, n, keep and n == 1) for r in requests)))

    # ------------------------------------------------------------------ request bodies
    def _sampling_fields(self) -> dict[str, Any]:
        s = self.sampling
        body: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if self.server == "vllm":
            body["top_k"] = s.top_k if s.top_k > 0 else -1
        elif s.top_k > 0:
            raise ValueError("top_k is not a standard OpenAI field: use server='vllm'")
        return body

    def cache_identity(self) -> dict[str, Any]:
        """What a response cache keys this server's model by (the request body holds the
        rest: model id, messages, tools, sampling, seed, ``n``)."""
        return {"engine": "openai", "model": self.client.model, "revision": self.revision}

    async def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body``, answered from the cache when it was sent before (then stored)."""
        if self.cache is None:
            return await self.client.post(path, body)
        key = self.cache.key(self.cache_identity(), {"path": path, "body": dict(body)})
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        data = await self.client.post(path, body)
        self.cache.put(key, data)
        return data

    async def _fan_out(
        self, path: str, body: dict[str, Any], base_seed: int, n: int
    ) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
        """``n`` choices for ``body``: one request with ``n`` or ``n`` requests with seed + i."""
        if self.native_n:
            data = as_object(await self._post(path, {**body, "n": n, "seed": base_seed}), "it")
            choices = [
                as_object(c, f"choices[{i}]")
                for i, c in enumerate(as_list(data.get("choices"), "choices"))
            ]
            if len(choices) != n:
                raise ServerError(f"asked for n={n} choices, got {len(choices)}")
            index = [c.get("index", 0) for c in choices]
            if all(isinstance(i, int) and not isinstance(i, bool) for i in index):
                choices = [c for _, c in sorted(zip(index, choices), key=lambda p: p[0])]
            return [(data, c) for c in choices]
        datas = await asyncio.gather(
            *(self._post(path, {**body, "seed": base_seed + i}) for i in range(n))
        )
        out = []
        for data in datas:
            data = as_object(data, "it")
            choices = as_list(data.get("choices"), "choices")
            if not choices:
                raise ServerError("asked for a choice, got none")
            out.append((data, as_object(choices[0], "choices[0]")))
        return out

    def _chat_messages(self, request: TurnRequest) -> list[dict[str, Any]]:
        """The request's conversation in OpenAI's chat format (the tool layout with tools)."""
        system = system_prompt_for(request, self.system_prompt, self.tools)
        if not self.tools:
            return list(build_conversation(request.messages, system, self.fold_system))
        native = self.tool_prompt == "native"
        layout = tool_conversation(
            request.messages, system, request.tools, native=native, fold_system=self.fold_system
        )
        wire: list[dict[str, Any]] = []
        last_ids: list[str] = []
        for index, message in enumerate(layout):
            if message.get("tool_calls"):
                calls = message["tool_calls"]
                last_ids = [f"call_{index}_{i}" for i in range(len(calls))]
                wire.append(
                    {
                        "role": "assistant",
                        "content": message.get("content") or None,
                        "tool_calls": [
                            ToolCall(c["function"]["name"], c["function"]["arguments"]).openai_wire(
                                call_id
                            )
                            for c, call_id in zip(calls, last_ids)
                        ],
                    }
                )
            elif message["role"] == "tool":
                wire.append(
                    {
                        "role": "tool",
                        "tool_call_id": last_ids[0] if last_ids else "call_0",
                        "content": message["content"],
                    }
                )
            else:
                wire.append(dict(message))
        return wire

    def _read_message(self, message: Mapping[str, Any]) -> tuple[str, list[ToolCall] | None]:
        """The action of a chat reply and, with tools on, its well-formed calls.

        ``tool_calls`` entries of any shape or depth are read by
        :func:`~multiturn_envs.tools.call_from_openai`: a malformed one becomes the text of
        what it holds, which the env refuses with a clear observation (a turn), never an
        exception here. A ``tool_calls`` that is not an array is one such entry."""
        raw = as_text(message.get("content"), "message.content")
        if not self.tools:
            return self.extractor(raw), None
        entries = message.get("tool_calls") or []
        if entries:
            if not isinstance(entries, list):
                entries = [entries]
            read = [call_from_openai(e) for e in entries]
            calls = [c for c in read if isinstance(c, ToolCall)]
            text = "\n".join(c.text() if isinstance(c, ToolCall) else c for c in read)
            return text, calls
        action, parsed = parse_hermes(ActionExtractor()(raw))
        if parsed is None:
            return self.extractor(raw), []
        return action, parsed

    async def _chat(self, request: TurnRequest, n: int, keep: bool) -> list[Reply]:
        body: dict[str, Any] = {
            "model": self.client.model,
            "messages": self._chat_messages(request),
            **self._sampling_fields(),
        }
        if self.tools and request.tools and self.tool_prompt == "native":
            body["tools"] = [t.openai() for t in request.tools]
            if self.tool_choice is not None:
                body["tool_choice"] = self.tool_choice
        if self.logprobs:
            body["logprobs"] = True
        if self.server == "vllm":
            body["return_token_ids"] = True
            if self.chat_template_kwargs:
                body["chat_template_kwargs"] = self.chat_template_kwargs
        body.update(self.extra_body)
        replies = []
        for data, choice in await self._fan_out(
            "/chat/completions", body, sample_seed_base(request.seed), n
        ):
            message = as_object(choice.get("message") or {}, "message")
            raw = as_text(message.get("content"), "message.content")
            action, calls = self._read_message(message)
            lp = choice.get("logprobs") or {}
            content = as_list(lp.get("content") or [], "logprobs.content") if lp else []
            prompt_ids = as_numbers(data.get("prompt_token_ids"), "prompt_token_ids", int)
            token_ids = as_numbers(choice.get("token_ids"), "token_ids", int)
            entries = message.get("tool_calls")
            replies.append(
                Reply(
                    text=action,
                    token_ids=token_ids,
                    logprobs=as_numbers(
                        [as_object(c, "a logprobs entry").get("logprob") for c in content],
                        "logprobs.content[].logprob",
                        float,
                    )
                    if content
                    else None,
                    meta={
                        "raw_text": raw,
                        "finish_reason": _finish_reason(choice.get("finish_reason")),
                        "prompt_len": None if prompt_ids is None else len(prompt_ids),
                        "prompt_continued": False,
                        "server_rendered": True,
                        # kept when it is a JSON value a record or a pickle can hold
                        **(
                            {"tool_calls_raw": entries}
                            if entries and within_bounds(entries)
                            else {}
                        ),
                    },
                    tool_calls=calls,
                    usage=usage_of(data, prompt_ids, token_ids),
                )
            )
        return replies

    async def _completions(self, request: TurnRequest, n: int, keep: bool) -> list[Reply]:
        assert self.prompter is not None
        prompt = self.prompter.prompt(request)
        body: dict[str, Any] = {
            "model": self.client.model,
            "prompt": prompt.token_ids,
            "logprobs": 0,
            **self._sampling_fields(),
        }
        if self.server == "vllm":
            body["return_token_ids"] = True
            body["skip_special_tokens"] = False
        body.update(self.extra_body)
        out = []
        for _data, choice in await self._fan_out(
            "/completions", body, sample_seed_base(request.seed), n
        ):
            ids = as_numbers(choice.get("token_ids"), "token_ids", int)
            if ids is None:
                raise ServerError(
                    "mode='completions' needs the generated token ids; this server returned none "
                    "(vLLM returns them with return_token_ids; else use mode='chat')"
                )
            logprobs = as_object(choice.get("logprobs") or {}, "logprobs")
            lps = as_numbers(logprobs.get("token_logprobs"), "logprobs.token_logprobs", float)
            text, _ = cut_at_stop(as_text(choice.get("text"), "text"), self.sampling.stop)
            completion = Completion(
                token_ids=ids,
                logprobs=lps,
                text=text,
                finish_reason=_finish_reason(choice.get("finish_reason")) or "stop",
            )
            out.append(self.prompter.finish(request, prompt, completion, keep=keep))
        return out
