"""verl adapter: an agent loop that plays any MT/* env and returns what verl trains on.

verl's multi-turn rollouts (verl 0.9, ``verl.experimental.agent_loop``) are agent loops: an
``AgentLoopBase`` subclass registered by name whose ``async run(sampling_params, **row)`` talks
to verl's LLM server (``server_manager.generate(request_id, prompt_ids=..., sampling_params=...)``
returning token ids and log-probs) and returns an ``AgentLoopOutput``: ``prompt_ids``,
``response_ids`` (every token after the prompt: generated *and* environment tokens),
``response_mask`` (1 for generated, 0 for environment tokens), ``response_logprobs``,
``reward_score``, ``num_turns`` and ``extra_fields``. Turn caps come from
``actor_rollout_ref.rollout.multi_turn.max_assistant_turns`` / ``max_user_turns`` and the token
cap from ``rollout.response_length``.

Two layers:

* :func:`run_episode` plays one episode given a tokenizer and an async ``generate(prompt_ids,
  seed) -> (token_ids, logprobs)``; it has no verl dependency. Token ids are built
  incrementally by :class:`~multiturn_envs.policies.prompting.ChatPrompter` (the ids the model
  generated stay verbatim, env messages are rendered and appended), so the response is exactly
  the token sequence the policy saw and produced; a chat template that rewrites earlier turns is
  refused with a clear error because no single sequence could then hold the episode.
* :class:`MTEnvAgentLoop` (registered as ``"mt_env"``) is the verl agent loop around it; it is
  defined only when verl imports. Dataset rows select the env with ``env_id`` and
  ``env_kwargs`` and the episode with the episode kit's fields (``task_id``, ``seed``,
  ``max_turns``, ``budget_mode``, ``error_after``, ``reward``: one reader,
  :class:`~multiturn_envs.episode.EpisodeStart`), each at the top level or inside
  ``extra_info``, plus ``agent_name: "mt_env"``.

The env's turn budget and verl's caps are applied together: the episode ends at the first of
success/terminal state, the env's budget (a row's ``max_turns`` is passed as a reset option:
it wins over the env's wrappers and defaults, for that episode only), ``max_assistant_turns``
(or ``max_user_turns``, env observations being the user turns), ``response_length`` tokens,
or (with tools) a reply without a tool call. The episode is kept in an
:class:`~multiturn_envs.episode.EpisodeLog`, and ``extra_fields`` are derived from it: why
it ended (``stop_reason``, in verl's words: :data:`STOP_REASONS`) plus ``success``, ``turns``,
``first_success_turn`` and ``step_scores`` (the oracle's).

Per-step credit: ``reward_score`` is the episode's score under a registered reward
(:mod:`multiturn_envs.rewards`; a row's ``reward``, default ``"outcome"``, the episode's return)
and ``extra_fields["turn_scores"]`` its per-turn credits (they sum to ``reward_score``), the
field verl's own tool agent loop fills and its ``AgentLoopWorker`` carries into the batch
(``non_tensor_batch["turn_scores"]``); ``tool_rewards`` are the env's own rewards per turn.

Tools (a row's ``tools: true``): the env's typed tools are rendered through the model's chat
template, and each response is read by **verl's own tool parser** (``ToolParser`` of
``actor_rollout_ref.rollout.multi_turn.format``, e.g. ``hermes``): its calls are the action
(in the env's canonical ``<tool_call>`` text); a response the parser finds no call in is a
stop (the one rule, :func:`multiturn_envs.policies.tool_layout.replies_stop`), unless it still
holds the parser's call marker (a malformed call: the env reads it and says what is wrong).

Async: the env is made, reset, stepped and closed without blocking verl's event loop: envs that
wait on I/O (DeepCoder's and Terminal's containers) in a worker thread, others inline
(:func:`multiturn_envs.core.astep_env`), so a Docker step never stalls the other agent loops
of the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import gymnasium as gym

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.core import aclose_env, astep_env
from multiturn_envs.episode import EpisodeLog, EpisodeStart, make_env
from multiturn_envs.policies.action_extractor import ActionExtractor
from multiturn_envs.policies.base import TurnRequest
from multiturn_envs.policies.prompting import ChatPrompter, Completion
from multiturn_envs.policies.tool_layout import parse_hermes, replies_stop
from multiturn_envs.rewards import RewardSpec, make_reward
from multiturn_envs.tools import Tool, ToolCall, call_from_openai
from multiturn_envs.wrappers.turn_budget import text_env_of

STOP_REASONS: dict[str, str] = {
    "turn_budget": "budget",
    "agent_stopped": "no_call",
    "turn_cap": "max_assistant_turns",
    "user_turn_cap": "max_user_turns",
}
"""``extra_fields["stop_reason"]``: an episode's end (:data:`~multiturn_envs.episode.ENDS`)
in verl's words, where they differ (the others keep their name: ``success``, ``terminal``,
``response_length``, ...)."""

Generate = Callable[[list[int], int], Awaitable[tuple[list[int], list[float] | None]]]
"""``generate(prompt_ids, seed) -> (generated ids, their log-probs or None)``."""

ParseCalls = Callable[[list[int], Sequence[Tool]], Awaitable[tuple[str, list[ToolCall] | None]]]
"""``parse(response_ids, tools) -> (action text, calls)``: a response's tool calls (``None``:
the response holds no call at all). :func:`verl_tool_parser` wraps verl's parsers."""


@dataclass
class EpisodeTokens:
    """One episode as verl's agent loop output wants it (plain lists; see the module doc)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = field(default_factory=list)
    reward_score: float = 0.0
    num_turns: int = 1
    extra_fields: dict[str, Any] = field(default_factory=dict)


def _extend(tokens: EpisodeTokens, ids: list[int], mask: int, lps: list[float] | None) -> None:
    tokens.response_ids.extend(ids)
    tokens.response_mask.extend([mask] * len(ids))
    if tokens.response_logprobs is not None:
        if lps is None:
            tokens.response_logprobs = None
        else:
            tokens.response_logprobs.extend(lps)


async def run_episode(
    env: gym.Env[str, str],
    tokenizer: Any,
    generate: Generate,
    *,
    task_id: str | None = None,
    seed: int | None = None,
    max_turns: int | None = None,
    budget_mode: str | None = None,
    error_after: int | tuple[int, int] | None = None,
    start: EpisodeStart | None = None,
    max_assistant_turns: int | None = None,
    max_user_turns: int | None = None,
    response_length: int | None = None,
    system_prompt: str | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    extractor: Callable[[str], str] | None = None,
    reward: RewardSpec = "outcome",
    tools: bool = False,
    parse_calls: ParseCalls | None = None,
) -> EpisodeTokens:
    """Play one episode of ``env`` with ``generate``; return its tokens, mask and reward.

    Args:
        env: a made MT/* env (wrappers included); it is reset here, not closed.
        tokenizer: the policy's tokenizer (with its chat template).
        generate: the model, ids in and ids (plus log-probs) out.
        task_id, seed: the reset's task and seed.
        max_turns, budget_mode: this episode's turn budget (default: the env's own).
        error_after: start in an error state (k expert steps, then one wrong action).
        start: all of the above read from a row (:class:`~multiturn_envs.episode.EpisodeStart`,
            what the agent loop passes; its ``reward`` wins over ``reward``); give either
            this or the separate arguments.
        max_assistant_turns, max_user_turns, response_length: verl's caps (``None``: none).
        system_prompt, chat_template_kwargs, extractor: see :class:`ChatPrompter`.
        reward: the registered reward ``reward_score`` is the score of (default: the return);
            ``turn_scores`` are its per-turn credits.
        tools: render the env's tools and read calls (module docstring); ``parse_calls``
            reads them (default: the Hermes/Qwen parser; the agent loop gives verl's own).
    """
    base = text_env_of(env)
    given = {
        "task_id": task_id,
        "seed": seed,
        "max_turns": max_turns,
        "budget_mode": budget_mode,
        "error_after": error_after,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if start is not None and given:
        raise ValueError(f"give the episode as start or as arguments, not both ({sorted(given)})")
    start = start if start is not None else EpisodeStart.of(**given)
    seed = start.seed
    log = EpisodeLog(start.reward_or(make_reward(reward)))
    _, info = await start.areset(env)
    log.begin(info, seed=seed)
    prompter = ChatPrompter(
        tokenizer,
        system_prompt=system_prompt,
        chat_template_kwargs=chat_template_kwargs,
        extractor=extractor or ActionExtractor(),
        tools=tools,
    )
    episode_id = uuid4().hex

    def request_at(turn: int) -> TurnRequest:
        return TurnRequest(
            base.messages(),
            base,
            turn,
            episode_id,
            base.system_prompt(),
            tuple(base.tools()),
            base.tool_system_prompt(),
        )

    request = request_at(0)
    first = prompter.prompt(request)
    tokens = EpisodeTokens(prompt_ids=list(first.token_ids))
    full = list(first.token_ids)
    assistant_turns = user_turns = 0
    while True:
        if max_assistant_turns and assistant_turns >= max_assistant_turns:
            log.stop("turn_cap")
            break
        request = request_at(assistant_turns)
        prompt = prompter.prompt(request)
        if assistant_turns:
            if not prompt.continued or prompt.token_ids[: len(full)] != full:
                raise ValueError(
                    "the chat template rewrites earlier turns, so one token sequence cannot hold "
                    "the episode; use a prefix-preserving template"
                )
            delta = prompt.token_ids[len(full) :]
            if response_length is not None and len(tokens.response_ids) + len(delta) >= (
                response_length
            ):
                log.stop("response_length")
                break
            _extend(tokens, delta, 0, [0.0] * len(delta))
            full = list(prompt.token_ids)
            user_turns += 1
            if max_user_turns and user_turns >= max_user_turns:
                log.stop("user_turn_cap")
                break
        ids, lps = await generate(
            list(prompt.token_ids), int(seed or 0) * 1_000_003 + assistant_turns
        )
        if response_length is not None:
            room = response_length - len(tokens.response_ids)
            ids, lps = ids[:room], None if lps is None else lps[:room]
        _extend(tokens, list(ids), 1, None if lps is None else list(lps))
        full += list(ids)
        text = tokenizer.decode(ids, skip_special_tokens=not tools)
        read = None
        if tools and parse_calls is not None:
            read = await parse_calls(list(ids), request.tools)
        completion = Completion(list(ids), lps, text, "stop")
        reply = prompter.finish(request, prompt, completion, read=read)
        assistant_turns += 1
        if replies_stop(reply.tool_calls, reply.text, base.reply_without_call):
            log.stop("agent_stopped")
            break
        _, env_reward, terminated, truncated, info = await astep_env(env, reply.text)
        log.add(env_reward, terminated, truncated, info)
        if terminated or truncated:
            break
        if response_length is not None and len(tokens.response_ids) >= response_length:
            log.stop("response_length")
            break
    prompter.forget(episode_id)
    tokens.reward_score = log.score
    tokens.num_turns = 1 + assistant_turns + user_turns
    tokens.extra_fields = extra_fields(log, base.max_turns)
    return tokens


def extra_fields(log: EpisodeLog, max_turns: int | None) -> dict[str, Any]:
    """verl's ``extra_fields`` of an episode, derived from its log (module docstring)."""
    end = log.end.name if log.end is not None else "env"
    return {
        "task_id": log.task_id,
        "success": log.success,
        "turns": len(log.turns),
        "first_success_turn": log.first_success,
        "max_turns": max_turns,
        "step_scores": log.step_scores,
        "turn_scores": [float(c) for c in log.credits],
        "tool_rewards": log.rewards,
        "stop_reason": STOP_REASONS.get(end, end),
    }


def verl_tool_parser(parser: Any, marker: str = "<tool_call>") -> ParseCalls:
    """``parse_calls`` through one of verl's ``ToolParser`` instances (its
    ``extract_tool_calls(ids, tools)`` with the env's tools as verl's
    ``OpenAIFunctionToolSchema``). Its calls become the action; with none, a response that
    still holds ``marker`` (the parser refused a malformed call) is read by the Hermes reader,
    so the env answers the call as written, and any other response has no call."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    async def parse(ids: list[int], tools: Sequence[Tool]) -> tuple[str, list[ToolCall] | None]:
        try:
            schemas = [OpenAIFunctionToolSchema.model_validate(t.openai()) for t in tools]
        except Exception:  # a schema verl's model cannot hold (an untyped argument): none
            schemas = None
        content, found = await parser.extract_tool_calls(ids, schemas)
        if found:
            read = [
                call_from_openai({"function": {"name": c.name, "arguments": c.arguments}})
                for c in found
            ]
            calls = [c for c in read if isinstance(c, ToolCall)]
            text = "\n".join(c.text() if isinstance(c, ToolCall) else c for c in read)
            return text, calls
        decoded = await asyncio.to_thread(parser.tokenizer.decode, ids)
        if marker in decoded:
            action, attempted = parse_hermes(decoded)
            return action, attempted if attempted is not None else []
        return str(content), None

    return parse


def _row_field(row: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """A row field that is not the episode's (``env_id``, ``env_kwargs``, ``tools``): top
    level, else in ``extra_info``, as :class:`~multiturn_envs.episode.EpisodeStart` reads."""
    if name in row and row[name] is not None:
        return row[name]
    extra = row.get("extra_info") or {}
    return extra.get(name, default) if isinstance(extra, Mapping) else default


try:  # the agent loop exists only where verl imports
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError:  # pragma: no cover - depends on the install
    VERL_AVAILABLE = False
else:
    VERL_AVAILABLE = True

    @register("mt_env")
    class MTEnvAgentLoop(AgentLoopBase):
        """verl agent loop playing an MT/* env; rows name it with ``agent_name: "mt_env"``.

        Row fields (top level or in ``extra_info``): ``env_id`` (required), ``env_kwargs``
        (for ``gym.make``), ``tools`` (true: the env's typed tools, read by verl's parser of
        ``multi_turn.format``) and the episode's (:class:`~multiturn_envs.episode.EpisodeStart`:
        ``task_id``, ``seed``, ``max_turns``, ``budget_mode``, ``error_after``, ``reward``, a
        registered reward's name or ``{"name": ..., **params}``; default ``"outcome"``).
        """

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            env_id = _row_field(kwargs, "env_id")
            if not env_id:
                raise ValueError("an mt_env row needs an env_id (top level or in extra_info)")
            env_kwargs = dict(_row_field(kwargs, "env_kwargs", {}) or {})
            extra = kwargs.get("extra_info")
            start = EpisodeStart.from_row(
                kwargs, fallback=extra if isinstance(extra, Mapping) else None
            )
            env = await asyncio.to_thread(make_env, str(env_id), env_kwargs)
            multi_turn = self.rollout_config.multi_turn
            tools = bool(_row_field(kwargs, "tools", False))
            parse_calls = None
            if tools:
                from verl.experimental.agent_loop.tool_parser import ToolParser

                name = str(getattr(multi_turn, "format", None) or "hermes")
                parse_calls = verl_tool_parser(ToolParser.get_tool_parser(name, self.tokenizer))
            request_id = uuid4().hex

            async def generate(prompt_ids: list[int], seed: int) -> tuple[list[int], Any]:
                params = dict(sampling_params)
                params.setdefault("seed", seed)
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=prompt_ids, sampling_params=params
                )
                return list(out.token_ids), out.log_probs

            try:
                tokens = await run_episode(
                    env,
                    self.tokenizer,
                    generate,
                    start=start,
                    max_assistant_turns=multi_turn.max_assistant_turns,
                    max_user_turns=multi_turn.max_user_turns,
                    response_length=self.rollout_config.response_length,
                    chat_template_kwargs=self.apply_chat_template_kwargs,
                    tools=tools,
                    parse_calls=parse_calls,
                )
            finally:
                await aclose_env(env)  # after any step still running (a cancelled one's)
            return verl_output(tokens)

    def verl_output(tokens: EpisodeTokens) -> AgentLoopOutput:
        """:class:`EpisodeTokens` as verl's (validated) ``AgentLoopOutput``."""
        return AgentLoopOutput(
            prompt_ids=tokens.prompt_ids,
            response_ids=tokens.response_ids,
            response_mask=tokens.response_mask,
            response_logprobs=tokens.response_logprobs,
            reward_score=tokens.reward_score,
            num_turns=tokens.num_turns,
            metrics=AgentLoopMetrics(),
            extra_fields=dict(tokens.extra_fields),
        )
