"""A model trained through TRL's tool interface, as the harness's policy and scoring model.

GRPO through :mod:`multiturn_envs.adapters.trl` trains a model to take each turn as a call of
the ``act`` tool, with observations coming back as tool results. Evaluated in the plain chat
layout it would see a conversation it was never trained on, so here it is wrapped in the layout
it was trained in (:class:`~multiturn_envs.rl.tool_format.ToolLayoutTokenizer`): the run's
system prompt and tool schema, actions as tool calls, and the action pulled out of the call.
The same view makes the scoring model, so action NLL and LLR score the calls the model emits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiturn_envs.policies.prompting import ActionExtractor, ChatPrompter, Sampling
from multiturn_envs.policies.scoring import ScoringModel, TransformersScorer
from multiturn_envs.policies.transformers_backend import TransformersPolicy
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.tool_format import ACTION_PATTERN, ToolLayoutTokenizer
from multiturn_envs.rl.train import act_tool, load_model, system_prompt


def template_kwargs(config: TrainConfig) -> dict[str, Any]:
    """The chat template variables the run trained with (``GRPOConfig.chat_template_kwargs``,
    e.g. ``{"enable_thinking": False}`` for Qwen3), so evaluation renders what training did."""
    return dict(config.trl.get("chat_template_kwargs") or {})


def tool_layout_policy(
    folder: str | Path,
    config: TrainConfig,
    *,
    name: str | None = None,
    temperature: float = 1.0,
    max_tokens: int = 48,
) -> TransformersPolicy:
    """The model at ``folder`` (trained with ``config``) as a harness policy in its tool layout.

    ``max_tokens`` must hold one whole tool call; a cut call is an unparsable action.
    """
    model, tokenizer = load_model(str(folder))
    return TransformersPolicy(
        model,
        ToolLayoutTokenizer(tokenizer, [act_tool(config)]),
        Sampling(temperature=temperature, max_tokens=max_tokens),
        name=name or Path(folder).name,
        system_prompt=system_prompt(config),
        chat_template_kwargs=template_kwargs(config),
        extractor=ActionExtractor(ACTION_PATTERN),
    )


def tool_layout_scorer(folder: str | Path, config: TrainConfig, name: str) -> ScoringModel:
    """The model at ``folder`` as a teacher-forcing scoring model in its tool layout: each
    action is scored as the whole call the model would emit for it, EOS included."""
    model, tokenizer = load_model(str(folder))
    prompter = ChatPrompter(
        ToolLayoutTokenizer(tokenizer, [act_tool(config)]),
        system_prompt=system_prompt(config),
        chat_template_kwargs=template_kwargs(config),
        extractor=ActionExtractor(ACTION_PATTERN),
    )
    return ScoringModel(name, "transformers", "float32", prompter, TransformersScorer(model))
