"""Log-prob scoring of given actions in context (teacher forcing), one trajectory per request.

A scorer takes :class:`~multiturn_envs.policies.token_sequences.ScoringSequence` s (token ids
plus the ``[start, end)`` spans of the actions) and returns the log-prob of every span token given
all the ids before it: ``log p(ids[t] | ids[:t])`` at temperature 1, the same raw log-probs the
backends record at generation. One whole trajectory is one sequence, so scoring a T-turn episode
costs one forward pass, not T growing ones (O(T) instead of O(T^2) tokens).

Where sequences come from:

* a policy's own replies:
  :func:`~multiturn_envs.policies.token_sequences.trajectory_sequences` rebuilds the exact
  generated ids, so scoring them under the generating model gives back
  ``Reply.logprobs`` (the tests assert it);
* any conversation under any model (policy A's actions under model B, for NLL and LLR):
  :meth:`~multiturn_envs.policies.prompting.ChatPrompter.sequence_of` with model B's prompter.

Backends: :class:`TransformersScorer`; :class:`VLLMScorer` (``prompt_logprobs`` on an engine with
prefix caching OFF: prompt log-probs computed with cached prefixes depend on request order,
vllm#42019); :class:`CompletionsScorer` (``/v1/completions`` with ``echo`` on an
OpenAI-compatible server that takes token-id prompts, e.g. vLLM). Compare two policies' log-probs
only when they come from the same engine and dtype: bf16 vLLM and HF differ by up to ~0.3 nats
per token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from multiturn_envs.policies.conversation import build_conversation
from multiturn_envs.policies.prompting import ChatPrompter
from multiturn_envs.policies.token_sequences import ScoringSequence
from multiturn_envs.tools import Tool

__all__ = [
    "CompletionsScorer",
    "Scorer",
    "ScoringModel",
    "TrajectoryText",
    "TransformersScorer",
    "VLLMScorer",
    "ensure_comparable",
]

SpanLogprobs = list[list[float]]
"""Per span, the log-prob of each of its tokens."""


class Scorer(Protocol):
    """Anything that scores spans of token sequences."""

    def score(self, sequences: Sequence[ScoringSequence]) -> list[SpanLogprobs]: ...


def span_sums(scored: Sequence[SpanLogprobs]) -> list[list[float]]:
    """Per sequence, the summed log-prob of each span (an action's log-likelihood)."""
    return [[float(sum(span)) for span in seq] for seq in scored]


def _needed_positions(seq: ScoringSequence) -> list[int]:
    """Logit positions that predict span tokens (position t-1 predicts token t)."""
    return sorted({t - 1 for a, b in seq.spans for t in range(a, b)})


class TransformersScorer:
    """Teacher forcing with a transformers causal LM.

    Sequences are right-padded into batches of at most ``max_batch_tokens`` padded tokens, and
    the LM head runs only at the positions that predict span tokens (``logits_to_keep``), so the
    logits tensor is ``[batch, positions, vocab]`` rather than ``[batch, length, vocab]``.
    """

    def __init__(self, model: Any, max_batch_tokens: int = 8192) -> None:
        self.model = model
        self.max_batch_tokens = max_batch_tokens

    def score(self, sequences: Sequence[ScoringSequence]) -> list[SpanLogprobs]:
        import torch

        results: list[SpanLogprobs | None] = [None] * len(sequences)
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i].token_ids))
        batch: list[int] = []
        for i in order:
            # sorted longest first, so the batch's first sequence sets its padded width
            width = len(sequences[batch[0] if batch else i].token_ids)
            if batch and width * (len(batch) + 1) > self.max_batch_tokens:
                self._score_batch(sequences, batch, results, torch)
                batch = []
            batch.append(i)
        if batch:
            self._score_batch(sequences, batch, results, torch)
        return [r if r is not None else [] for r in results]

    def _score_batch(
        self,
        sequences: Sequence[ScoringSequence],
        batch: Sequence[int],
        results: list[SpanLogprobs | None],
        torch: Any,
    ) -> None:
        seqs = [sequences[i] for i in batch]
        if all(not s.spans for s in seqs):
            for i in batch:
                results[i] = [[] for _ in sequences[i].spans]
            return
        width = max(len(s.token_ids) for s in seqs)
        device = self.model.device
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, : len(s.token_ids)] = torch.tensor(s.token_ids, dtype=torch.long)
            mask[row, : len(s.token_ids)] = 1
        keep = sorted({p for s in seqs for p in _needed_positions(s)})
        column = {p: j for j, p in enumerate(keep)}
        with torch.inference_mode():
            out = self.model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                logits_to_keep=torch.tensor(keep, dtype=torch.long, device=device),
                use_cache=False,
            )
            logp = torch.log_softmax(out.logits.float(), dim=-1).cpu()
        for row, (i, s) in enumerate(zip(batch, seqs)):
            results[i] = [
                [float(logp[row, column[t - 1], s.token_ids[t]]) for t in range(a, b)]
                for a, b in s.spans
            ]


class VLLMScorer:
    """Prompt log-probs from a vLLM engine (``max_tokens=1, prompt_logprobs=0``), one call for all.

    Build the engine with :meth:`from_model`, which turns prefix caching OFF (order-dependent
    prompt log-probs otherwise, vllm#42019; vLLM also never reads the cache for prompt log-probs,
    so it buys nothing). Keep ``max_num_batched_tokens`` moderate: the logits of every scheduled
    prompt token and their fp32 log-softmax are not in vLLM's memory profile.
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    @classmethod
    def from_model(cls, model: str, **engine_args: Any) -> VLLMScorer:
        from multiturn_envs.policies.vllm_backend import import_vllm

        vllm = import_vllm()
        engine_args["enable_prefix_caching"] = False
        engine_args.setdefault("max_num_batched_tokens", 8192)
        return cls(vllm.LLM(model=model, **engine_args))

    def score(self, sequences: Sequence[ScoringSequence]) -> list[SpanLogprobs]:
        from multiturn_envs.policies.vllm_backend import import_vllm

        vllm = import_vllm()
        prompts = [vllm.TokensPrompt(prompt_token_ids=list(s.token_ids)) for s in sequences]
        # no seed: the one sampled token is thrown away, and an unseeded request has no
        # generator for vLLM to rewind when it splits a long sequence (chunked prefill), which
        # on the CPU build kills the engine (vllm_backend's module docstring)
        params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        outputs = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
        results = []
        for s, o in zip(sequences, outputs):
            per_position = o.prompt_logprobs
            results.append(
                [
                    [float(per_position[t][s.token_ids[t]].logprob) for t in range(a, b)]
                    for a, b in s.spans
                ]
            )
        return results


class CompletionsScorer:
    """``POST /v1/completions`` with ``echo`` and token-id prompts (vLLM's OpenAI server).

    One request per trajectory, ``max_concurrency`` in flight. ``max_tokens`` is 1 because some
    servers reject 0; the one generated token is ignored.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_concurrency: int = 16,
        timeout_s: float = 120.0,
        max_retries: int = 3,
    ) -> None:
        from multiturn_envs.policies.openai_backend import OpenAIClient

        self.client = OpenAIClient(
            base_url,
            model,
            api_key=api_key,
            max_concurrency=max_concurrency,
            timeout_s=timeout_s,
            max_retries=max_retries,
        )

    async def ascore(self, sequences: Sequence[ScoringSequence]) -> list[SpanLogprobs]:
        from multiturn_envs.policies.openai_backend import ServerError, echoed_logprobs

        async def one(s: ScoringSequence) -> SpanLogprobs:
            body = {
                "model": self.client.model,
                "prompt": list(s.token_ids),
                "echo": True,
                "max_tokens": 1,
                "logprobs": 0,
                "temperature": 1.0,
            }
            lps = echoed_logprobs(await self.client.post("/completions", body))
            if len(lps) < len(s.token_ids):
                raise RuntimeError(
                    f"server echoed {len(lps)} log-probs for a {len(s.token_ids)}-token prompt"
                )
            spans = [[lps[t] for t in range(a, b)] for a, b in s.spans]
            if any(x is None for span in spans for x in span):
                raise ServerError("the server echoed no log-prob for a scored token")
            return [[float(x) for x in span if x is not None] for span in spans]

        await self.client.check_model()
        return list(await asyncio.gather(*(one(s) for s in sequences)))

    def score(self, sequences: Sequence[ScoringSequence]) -> list[SpanLogprobs]:
        from multiturn_envs.policies.openai_backend import run_sync

        return run_sync(self._scored_then_closed(sequences))

    async def _scored_then_closed(self, sequences: Sequence[ScoringSequence]) -> list[SpanLogprobs]:
        try:
            return await self.ascore(sequences)
        finally:
            await self.client.aclose()


# ------------------------------------------------------------------ scoring a conversation
@dataclass(frozen=True)
class TrajectoryText:
    """A conversation and where its actions are: what a :class:`ScoringModel` scores.

    The harness rebuilds one per recorded trajectory by replaying it
    (:func:`multiturn_envs.harness.likelihood.replay_trajectories`).

    Attributes:
        task_id, sample, success: from the record.
        messages: the env's chat messages up to and including the last action (user,
            assistant, user, ...; an injected error prefix included as the env renders it).
        systems: the env's system prompt at each action (usually one string repeated).
        action_index: for each action, the index of its assistant message in ``messages``.
    """

    task_id: str
    sample: int
    success: bool
    messages: list[dict[str, str]]
    systems: list[str]
    action_index: list[int]

    @property
    def n_actions(self) -> int:
        return len(self.action_index)


@dataclass
class ScoringModel:
    """A model that scores actions: its chat template (prompter) and a teacher-forcing scorer.

    Attributes:
        name: what tables call it.
        engine: ``"transformers"``, ``"vllm"`` or ``"openai-completions"``.
        dtype: the weights' dtype as the engine runs them (``"float32"``, ``"bfloat16"``, ...).
        prompter: renders conversations with the model's chat template.
        scorer: :class:`~multiturn_envs.policies.scoring.Scorer` of the same model.
        tools: the env's tools, for a prompter with ``tools=True`` (a model trained with the
            env's typed tools scores the calls in the tool layout it was trained in).
    """

    name: str
    engine: str
    dtype: str
    prompter: ChatPrompter
    scorer: Scorer
    tools: tuple[Tool, ...] = ()

    @property
    def identity(self) -> tuple[str, str]:
        return (self.engine, self.dtype)

    def sequences(self, trajectory: TrajectoryText) -> list[tuple[ScoringSequence, list[int]]]:
        """Token sequences covering every action of ``trajectory``, and the actions they hold.

        One sequence for the whole trajectory when the system prompt stays the same and the
        template renders history as a prefix; otherwise one sequence per action (its own
        context), which is exact but costs O(T^2) tokens.
        """
        prompter = self.prompter
        override = prompter.system_prompt
        n = trajectory.n_actions
        if n == 0:
            return []

        tools = self.tools

        def conversation(upto: int, system: str) -> list[dict[str, Any]]:
            msgs = trajectory.messages[: trajectory.action_index[upto] + 1]
            chosen = system if override is None else override
            if prompter.tools:
                return prompter.layout(msgs, chosen, tools)
            return build_conversation(msgs, chosen, prompter.fold_system)

        if len(set(trajectory.systems)) == 1:
            try:
                seq = prompter.sequence_of(conversation(n - 1, trajectory.systems[0]), tools=tools)
            except ValueError:
                pass
            else:
                if len(seq.spans) != n:
                    # the env's history had assistant turns before the recorded actions
                    seq = ScoringSequence(seq.token_ids, seq.spans[len(seq.spans) - n :])
                return [(seq, list(range(n)))]
        out = []
        for k in range(n):
            seq = prompter.sequence_of(
                conversation(k, trajectory.systems[k]), last_only=True, tools=tools
            )
            out.append((seq, [k]))
        return out

    def score(self, trajectories: Sequence[TrajectoryText]) -> list[list[list[float]]]:
        """Per trajectory, per action, the log-prob of each token (EOS included), one call."""
        plans = [self.sequences(t) for t in trajectories]
        flat = [seq for plan in plans for seq, _ in plan]
        scored = self.scorer.score(flat) if flat else []
        out: list[list[list[float]]] = []
        position = 0
        for traj, plan in zip(trajectories, plans):
            per_action: list[list[float]] = [[] for _ in range(traj.n_actions)]
            for _, actions in plan:
                for k, span in zip(actions, scored[position]):
                    per_action[k] = [float(x) for x in span]
                position += 1
            out.append(per_action)
        return out


def ensure_comparable(a: ScoringModel, b: ScoringModel) -> None:
    """Refuse to subtract log-probs of two engines or dtypes (bf16 vLLM vs HF: ~0.3 nats/token)."""
    if a.identity != b.identity:
        raise ValueError(
            f"an LLR subtracts log-probs: score both models on ONE engine and dtype, got "
            f"{a.name} on {a.engine}/{a.dtype} and {b.name} on {b.engine}/{b.dtype}"
        )
