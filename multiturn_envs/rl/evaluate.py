"""A model trained through TRL's tool interface, as the harness's policy and scoring model.

GRPO through :mod:`multiturn_envs.adapters.trl` trains a model to take each turn as a tool
call, with observations coming back as tool results. Evaluated in the plain chat layout it
would see a conversation it was never trained on, so here it is prompted in the layout it was
trained in. The generic layout (``TrainConfig.tools="act"``) wraps the tokenizer
(:class:`~multiturn_envs.rl.tool_format.ToolLayoutTokenizer`): the run's system prompt and tool
schema, actions as ``act`` calls, the action pulled out of the call. The typed layout
(``"env"``) is the harness's own tool-calling mode (``tools=True``): the env's tools through
the chat template, calls as actions, and a reply without a call ends the episode, as it ends
the rollout in TRL. The same view makes the scoring model, so action NLL and LLR score the
calls the model emits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiturn_envs.policies.action_extractor import ActionExtractor
from multiturn_envs.policies.prompting import ChatPrompter
from multiturn_envs.policies.sampling import Sampling
from multiturn_envs.policies.scoring import ScoringModel, TransformersScorer
from multiturn_envs.policies.transformers_backend import TransformersPolicy
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.tool_format import ACTION_PATTERN, ToolLayoutTokenizer
from multiturn_envs.rl.train import act_tool, env_tools, load_model, system_prompt


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
    if config.tools == "env":
        return TransformersPolicy(
            model,
            tokenizer,
            Sampling(temperature=temperature, max_tokens=max_tokens),
            name=name or Path(folder).name,
            system_prompt=system_prompt(config),
            chat_template_kwargs=template_kwargs(config),
            tools=True,
        )
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
    if config.tools == "env":
        typed = ChatPrompter(
            tokenizer,
            system_prompt=system_prompt(config),
            chat_template_kwargs=template_kwargs(config),
            tools=True,
        )
        return ScoringModel(
            name, "transformers", "float32", typed, TransformersScorer(model), env_tools(config)
        )
    prompter = ChatPrompter(
        ToolLayoutTokenizer(tokenizer, [act_tool(config)]),
        system_prompt=system_prompt(config),
        chat_template_kwargs=template_kwargs(config),
        extractor=ActionExtractor(ACTION_PATTERN),
    )
    return ScoringModel(name, "transformers", "float32", prompter, TransformersScorer(model))
