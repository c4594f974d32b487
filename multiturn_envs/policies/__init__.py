"""Policies and their stable API: the batched protocol, baselines, LLM backends, scoring models.

Import what you use from here (``from multiturn_envs.policies import load_policy``); names are
imported on first use, so heavy backends (torch, vLLM) load only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.policies.action_extractor import (
        ActionExtractor as ActionExtractor,
    )
    from multiturn_envs.policies.base import (
        AsyncPolicy as AsyncPolicy,
    )
    from multiturn_envs.policies.base import (
        CallablePolicy as CallablePolicy,
    )
    from multiturn_envs.policies.base import (
        Policy as Policy,
    )
    from multiturn_envs.policies.base import (
        PolicyCaller as PolicyCaller,
    )
    from multiturn_envs.policies.base import (
        Reply as Reply,
    )
    from multiturn_envs.policies.base import (
        TurnRequest as TurnRequest,
    )
    from multiturn_envs.policies.base import (
        TurnTokens as TurnTokens,
    )
    from multiturn_envs.policies.base import (
        as_policy as as_policy,
    )
    from multiturn_envs.policies.baselines import (
        ExpertPolicy as ExpertPolicy,
    )
    from multiturn_envs.policies.baselines import (
        NoisyExpertPolicy as NoisyExpertPolicy,
    )
    from multiturn_envs.policies.baselines import (
        RandomPolicy as RandomPolicy,
    )
    from multiturn_envs.policies.baselines import (
        random_action as random_action,
    )
    from multiturn_envs.policies.prompting import (
        ChatPrompter as ChatPrompter,
    )
    from multiturn_envs.policies.sampling import (
        Sampling as Sampling,
    )
    from multiturn_envs.policies.scoring import (
        CompletionsScorer as CompletionsScorer,
    )
    from multiturn_envs.policies.scoring import (
        Scorer as Scorer,
    )
    from multiturn_envs.policies.scoring import (
        ScoringModel as ScoringModel,
    )
    from multiturn_envs.policies.scoring import (
        TrajectoryText as TrajectoryText,
    )
    from multiturn_envs.policies.scoring import (
        TransformersScorer as TransformersScorer,
    )
    from multiturn_envs.policies.scoring import (
        VLLMScorer as VLLMScorer,
    )
    from multiturn_envs.policies.spec import (
        ENGINES as ENGINES,
    )
    from multiturn_envs.policies.spec import (
        Engine as Engine,
    )
    from multiturn_envs.policies.spec import (
        LLMSpec as LLMSpec,
    )
    from multiturn_envs.policies.spec import (
        load_llm_policy as load_llm_policy,
    )
    from multiturn_envs.policies.spec import (
        load_policy as load_policy,
    )
    from multiturn_envs.policies.spec import (
        load_scoring_model as load_scoring_model,
    )
    from multiturn_envs.policies.spec import (
        parse_llm_spec as parse_llm_spec,
    )

# name -> the submodule that defines it (imported on first use, so that importing this
# package stays light and a move inside it changes only this table)
_EXPORTS: dict[str, str] = {
    "Policy": "base",
    "AsyncPolicy": "base",
    "TurnRequest": "base",
    "Reply": "base",
    "TurnTokens": "base",
    "PolicyCaller": "base",
    "CallablePolicy": "base",
    "as_policy": "base",
    "RandomPolicy": "baselines",
    "ExpertPolicy": "baselines",
    "NoisyExpertPolicy": "baselines",
    "random_action": "baselines",
    "load_policy": "spec",
    "load_llm_policy": "spec",
    "load_scoring_model": "spec",
    "parse_llm_spec": "spec",
    "LLMSpec": "spec",
    "ENGINES": "spec",
    "Engine": "spec",
    "Sampling": "sampling",
    "ChatPrompter": "prompting",
    "ActionExtractor": "action_extractor",
    "ScoringModel": "scoring",
    "Scorer": "scoring",
    "TrajectoryText": "scoring",
    "TransformersScorer": "scoring",
    "VLLMScorer": "scoring",
    "CompletionsScorer": "scoring",
}

__all__ = [
    "ENGINES",
    "ActionExtractor",
    "AsyncPolicy",
    "CallablePolicy",
    "ChatPrompter",
    "CompletionsScorer",
    "Engine",
    "ExpertPolicy",
    "LLMSpec",
    "NoisyExpertPolicy",
    "Policy",
    "PolicyCaller",
    "RandomPolicy",
    "Reply",
    "Sampling",
    "Scorer",
    "ScoringModel",
    "TrajectoryText",
    "TransformersScorer",
    "TurnRequest",
    "TurnTokens",
    "VLLMScorer",
    "as_policy",
    "load_llm_policy",
    "load_policy",
    "load_scoring_model",
    "parse_llm_spec",
    "random_action",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
