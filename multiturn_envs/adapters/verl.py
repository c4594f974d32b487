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
  defined only when verl imports. Dataset rows select the env and episode with the fields
  ``env_id``, ``env_kwargs``, ``task_id``, ``seed`` and ``max_turns`` (top level, or inside
  ``extra_info``), plus ``agent_name: "mt_env"``.

The env's turn budget and verl's caps are applied together: the episode ends at the first of
success/terminal state, the env's budget (a row's ``max_turns`` is passed as a reset option:
it wins over the env's wrappers and defaults, for that episode only), ``max_assistant_turns``
(or ``max_user_turns``, env observations being the user turns) and ``response_length`` tokens.
``extra_fields`` report which (``stop_reason``) plus ``success``, ``turns``,
``first_success_turn`` and ``step_scores``. ``reward_score`` is the episode's score under a
registered reward (:mod:`multiturn_envs.rewards`; a row's ``reward``, default ``"outcome"``,
the episode's return).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import gymnasium as gym

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.policies.base import TurnRequest
from multiturn_envs.policies.prompting import ActionExtractor, ChatPrompter, Completion
from multiturn_envs.rewards import Episode, Turn, make_reward
from multiturn_envs.rewards.registry import RewardSpec
from multiturn_envs.wrappers.turn_budget import text_env_of

Generate = Callable[[list[int], int], Awaitable[tuple[list[int], list[float] | None]]]
"""``generate(prompt_ids, seed) -> (generated ids, their log-probs or None)``."""


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
    max_assistant_turns: int | None = None,
    max_user_turns: int | None = None,
    response_length: int | None = None,
    system_prompt: str | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    extractor: Callable[[str], str] | None = None,
    reward: RewardSpec = "outcome",
) -> EpisodeTokens:
    """Play one episode of ``env`` with ``generate``; return its tokens, mask and reward.

    Args:
        env: a made MT/* env (wrappers included); it is reset here, not closed.
        tokenizer: the policy's tokenizer (with its chat template).
        generate: the model, ids in and ids (plus log-probs) out.
        task_id, seed: the reset's task and seed.
        max_turns: this episode's turn budget (default: the env's own).
        max_assistant_turns, max_user_turns, response_length: verl's caps (``None``: none).
        system_prompt, chat_template_kwargs, extractor: see :class:`ChatPrompter`.
        reward: the registered reward ``reward_score`` is the score of (default: the return).
    """
    base = text_env_of(env)
    scorer = make_reward(reward)
    options: dict[str, Any] = {}
    if task_id is not None:
        options["task_id"] = str(task_id)
    if max_turns is not None:
        options["max_turns"] = int(max_turns)
    _, start = env.reset(seed=seed, options=options or None)
    turns: list[Turn] = []
    prompter = ChatPrompter(
        tokenizer,
        system_prompt=system_prompt,
        chat_template_kwargs=chat_template_kwargs,
        extractor=extractor or ActionExtractor(),
    )
    episode_id = uuid4().hex
    request = TurnRequest(base.messages(), base, 0, episode_id)
    first = prompter.prompt(request)
    tokens = EpisodeTokens(prompt_ids=list(first.token_ids))
    full = list(first.token_ids)
    step_scores: list[float] = []
    first_success: int | None = None
    stop = "env"
    assistant_turns = user_turns = 0
    while True:
        if max_assistant_turns and assistant_turns >= max_assistant_turns:
            stop = "max_assistant_turns"
            break
        request = TurnRequest(base.messages(), base, assistant_turns, episode_id)
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
                stop = "response_length"
                break
            _extend(tokens, delta, 0, [0.0] * len(delta))
            full = list(prompt.token_ids)
            user_turns += 1
            if max_user_turns and user_turns >= max_user_turns:
                stop = "max_user_turns"
                break
        ids, lps = await generate(
            list(prompt.token_ids), int(seed or 0) * 1_000_003 + assistant_turns
        )
        if response_length is not None:
            room = response_length - len(tokens.response_ids)
            ids, lps = ids[:room], None if lps is None else lps[:room]
        _extend(tokens, list(ids), 1, None if lps is None else list(lps))
        full += list(ids)
        text = tokenizer.decode(ids, skip_special_tokens=True)
        reply = prompter.finish(request, prompt, Completion(list(ids), lps, text, "stop"))
        assistant_turns += 1
        _, env_reward, terminated, truncated, info = env.step(reply.text)
        turns.append(Turn(float(env_reward), info, bool(terminated), bool(truncated)))
        step_scores.append(float(info["step_score"]))
        if first_success is None and info.get("success"):
            first_success = assistant_turns
        if terminated or truncated:
            stop = "success" if info.get("success") else ("budget" if truncated else "terminal")
            break
        if response_length is not None and len(tokens.response_ids) >= response_length:
            stop = "response_length"
            break
    prompter.forget(episode_id)
    tokens.reward_score = scorer.score(Episode(start, tuple(turns)))
    tokens.num_turns = 1 + assistant_turns + user_turns
    tokens.extra_fields = {
        "task_id": base.task_id,
        "success": bool(base.current_info()["success"]),
        "turns": assistant_turns,
        "first_success_turn": first_success,
        "max_turns": base.max_turns,
        "step_scores": step_scores,
        "stop_reason": stop,
    }
    return tokens


def _row_field(row: Mapping[str, Any], name: str, default: Any = None) -> Any:
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
        (for ``gym.make``), ``task_id``, ``seed``, ``max_turns``, ``reward`` (a registered
        reward's name or ``{"name": ..., **params}``; default ``"outcome"``).
        """

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            env_id = _row_field(kwargs, "env_id")
            if not env_id:
                raise ValueError("an mt_env row needs an env_id (top level or in extra_info)")
            env = gym.make(str(env_id), **dict(_row_field(kwargs, "env_kwargs", {}) or {}))
            multi_turn = self.rollout_config.multi_turn
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
                    task_id=_row_field(kwargs, "task_id"),
                    seed=_row_field(kwargs, "seed"),
                    max_turns=_row_field(kwargs, "max_turns"),
                    max_assistant_turns=multi_turn.max_assistant_turns,
                    max_user_turns=multi_turn.max_user_turns,
                    response_length=self.rollout_config.response_length,
                    chat_template_kwargs=self.apply_chat_template_kwargs,
                    reward=_row_field(kwargs, "reward", "outcome"),
                )
            finally:
                env.close()
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
