"""Rewards by name: :func:`make_reward`, :func:`reward_names`, :func:`reward_class`.

The one vocabulary of rewards: a config file, a CLI flag, a dataset row or a served client's
reset names a reward here, and this module checks the name and the parameters once, for all
of them. The built-in rewards are imported here so that their names are always known; a user's
reward is known once its module is imported (or pass the object itself wherever a name goes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from multiturn_envs.rewards import outcome, process, step_score
from multiturn_envs.rewards.base import Reward, registered_rewards

BUILT_IN: tuple[type[Reward], ...] = (
    outcome.Outcome,
    outcome.Success,
    process.Process,
    process.StepCredit,
    step_score.Shaped,
    step_score.MeanStepScore,
)
"""The rewards the library ships (docs/rewards.md has one entry for each)."""

RewardSpec = str | Reward | Mapping[str, Any]
"""A reward, or its name, or ``{"name": ..., **params}`` (JSON: a config, a client's reset)."""


def reward_names() -> tuple[str, ...]:
    """The names :func:`make_reward` accepts, sorted."""
    return tuple(sorted(registered_rewards()))


def reward_class(name: str) -> type[Reward]:
    """The reward class registered as ``name``, or a ``ValueError`` listing the names."""
    found = registered_rewards().get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"reward must be one of {reward_names()}, got {name!r:.100}")
    return found


def reward_params(name: str) -> tuple[str, ...]:
    """The parameters the reward ``name`` takes (its dataclass fields)."""
    cls = reward_class(name)
    return tuple(f.name for f in fields(cls)) if is_dataclass(cls) else ()


def make_reward(spec: RewardSpec, **params: Any) -> Reward:
    """A reward from its name (plus ``params``), a ``{"name": ..., **params}`` mapping, or the
    reward itself (returned as it is); a ``ValueError`` names what is wrong.

    >>> make_reward("process", weight=0.5).spec()
    {'name': 'process', 'weight': 0.5}
    """
    if isinstance(spec, Reward):
        if params:
            raise ValueError(f"a {spec.name or type(spec).__name__} reward object takes no params")
        return spec
    if isinstance(spec, Mapping):
        data = dict(spec)
        if "name" not in data:
            raise ValueError(f"a reward spec needs a name, got {sorted(map(str, data))[:20]}")
        name = data.pop("name")
        params = {**data, **params}
    else:
        name = spec
    cls = reward_class(name)
    allowed = reward_params(name)
    unknown = sorted(str(k) for k in params if k not in allowed)
    if unknown:
        raise ValueError(f"reward {name!r} takes {list(allowed)}, not {unknown[:20]}")
    return cls(**params)
