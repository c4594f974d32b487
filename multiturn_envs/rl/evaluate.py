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

:func:`expert_agreement` asks whether a model reads its observations: on given states (the
warm start's examples, e.g. of held-out tasks), how often its greedy reply is the expert's move
and how likely a sampled one is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multiturn_envs.policies.action_extractor import ActionExtractor
from multiturn_envs.policies.prompting import ChatPrompter
from multiturn_envs.policies.sampling import Sampling
from multiturn_envs.policies.scoring import ScoringModel, TransformersScorer
from multiturn_envs.policies.transformers_backend import TransformersPolicy
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.models import load_model
from multiturn_envs.rl.run_view import RunView
from multiturn_envs.rl.tool_format import ACTION_PATTERN, ToolLayoutTokenizer, split_reply

__all__ = [
    "ExpertAgreement",
    "expert_agreement",
    "template_kwargs",
    "tool_layout_policy",
    "tool_layout_scorer",
]


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
    view: RunView | None = None,
) -> TransformersPolicy:
    """The model at ``folder`` (trained with ``config``) as a harness policy in its tool layout.

    ``max_tokens`` must hold one whole tool call; a cut call is an unparsable action.
    ``view``: the run's (:class:`~multiturn_envs.rl.run_view.RunView`; default: asked now).
    """
    view = view if view is not None else RunView.of(config)
    model, tokenizer = load_model(str(folder))
    if config.tools == "env":
        return TransformersPolicy(
            model,
            tokenizer,
            Sampling(temperature=temperature, max_tokens=max_tokens),
            name=name or Path(folder).name,
            system_prompt=view.system_prompt,
            chat_template_kwargs=template_kwargs(config),
            tools=True,
        )
    return TransformersPolicy(
        model,
        ToolLayoutTokenizer(tokenizer, view.tool_functions()),
        Sampling(temperature=temperature, max_tokens=max_tokens),
        name=name or Path(folder).name,
        system_prompt=view.system_prompt,
        chat_template_kwargs=template_kwargs(config),
        extractor=ActionExtractor(ACTION_PATTERN),
    )


def tool_layout_scorer(
    folder: str | Path, config: TrainConfig, name: str, view: RunView | None = None
) -> ScoringModel:
    """The model at ``folder`` as a teacher-forcing scoring model in its tool layout: each
    action is scored as the whole call the model would emit for it, EOS included
    (``view``: the run's, default asked now)."""
    view = view if view is not None else RunView.of(config)
    model, tokenizer = load_model(str(folder))
    if config.tools == "env":
        typed = ChatPrompter(
            tokenizer,
            system_prompt=view.system_prompt,
            chat_template_kwargs=template_kwargs(config),
            tools=True,
        )
        return ScoringModel(
            name, "transformers", "float32", typed, TransformersScorer(model), view.tools
        )
    prompter = ChatPrompter(
        ToolLayoutTokenizer(tokenizer, view.tool_functions()),
        system_prompt=view.system_prompt,
        chat_template_kwargs=template_kwargs(config),
        extractor=ActionExtractor(ACTION_PATTERN),
    )
    return ScoringModel(name, "transformers", "float32", prompter, TransformersScorer(model))


@dataclass(frozen=True)
class ExpertAgreement:
    """How often a model's move is the expert's, over states where the expert moves.

    Attributes:
        states: the states scored (examples whose target is a call; closing replies skipped).
        greedy: the share of states whose greedy reply (temperature 0) names the expert's move.
        sampled: the mean probability of the expert's exact call, i.e. the share of
            temperature-1 samples that are the expert's move in that form (teacher-forced,
            no sampling noise).
        malformed: the share of greedy replies with no parsable call.
    """

    states: int
    greedy: float
    sampled: float
    malformed: float

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def expert_agreement(
    model: Any,
    tokenizer: Any,
    tools: Sequence[Callable[..., Any]],
    examples: Sequence[dict[str, Any]],
    *,
    max_tokens: int = 24,
) -> ExpertAgreement:
    """:class:`ExpertAgreement` of ``model`` on prompt-completion ``examples`` in TRL's tool
    layout (:func:`~multiturn_envs.rl.warm_start.expert_examples`: each completion a call of
    the expert's action). Rendered as SFT and GRPO render them (same template and tools)."""
    import math
    import re

    import torch

    pattern = re.compile(ACTION_PATTERN)
    greedy = sampled = malformed = 0.0
    states = 0
    stop = tokenizer.eos_token_id
    for example in examples:
        target = example["completion"][0]
        if not target.get("tool_calls"):
            continue
        expert = str(target["tool_calls"][0]["function"]["arguments"]["action"])
        prompt, reply = split_reply(tokenizer, tools, example["prompt"], target)
        p_ids = tokenizer.encode(prompt, add_special_tokens=False)
        r_ids = tokenizer.encode(reply, add_special_tokens=False)
        ids = torch.tensor([p_ids + r_ids])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0, len(p_ids) - 1 : -1].float()
            logprob = torch.log_softmax(logits, -1).gather(1, ids[0, len(p_ids) :, None]).sum()
            out = model.generate(
                ids[:, : len(p_ids)],
                attention_mask=torch.ones(1, len(p_ids), dtype=torch.long),
                do_sample=False,
                max_new_tokens=max_tokens,
                eos_token_id=stop,
                pad_token_id=tokenizer.pad_token_id,
            )
        text = tokenizer.decode(out[0, len(p_ids) :], skip_special_tokens=False)
        found = pattern.findall(text)
        states += 1
        sampled += math.exp(float(logprob))
        greedy += float(bool(found) and found[-1] == expert)
        malformed += float(not found)
    n = max(states, 1)
    return ExpertAgreement(states, greedy / n, sampled / n, malformed / n)
