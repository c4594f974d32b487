"""Rewards by name: :func:`make_reward`, :func:`reward_names`, :func:`reward_class`.

The one vocabulary of rewards: a config file, a CLI flag, a dataset row or a served client's
reset names a reward here, and this module checks the name and the parameters once, for all
of them. The built-in rewards are imported here so that their names are always known; a user's
reward is known once its module is imported (or pass the object itself wherever a name goes).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from multiturn_envs.rewards import outcome, process, step_score
from multiturn_envs.rewards.base import Reward, registered_rewards

__all__ = [
    "BUILT_IN",
    "OLD_NAMES",
    "RewardSpec",
    "current_name",
    "make_reward",
    "reward_class",
    "reward_names",
    "reward_params",
]

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

OLD_NAMES: dict[str, str] = {"return": "outcome", "env": "outcome", "step_score": "step_credit"}
"""Names rewards had before the registry (TRL's ``"return"``, GiGPO's step rewards ``"env"``
and ``"step_score"``) -> the registry's name. Still read, with a ``DeprecationWarning``, for one
release (CHANGELOG.md)."""


def current_name(name: Any) -> Any:
    """``name``, or the registry's name for an old one (:data:`OLD_NAMES`, with a
    ``DeprecationWarning`` saying what to write instead); anything else as it is."""
    if isinstance(name, str) and name in OLD_NAMES:
        warnings.warn(
            f"the reward name {name!r} is deprecated: write {OLD_NAMES[name]!r}",
            DeprecationWarning,
            stacklevel=3,
        )
        return OLD_NAMES[name]
    return name


def reward_names() -> tuple[str, ...]:
    """The names :func:`make_reward` accepts, sorted."""
    return tuple(sorted(registered_rewards()))


def reward_class(name: str) -> type[Reward]:
    """The reward class registered as ``name``, or a ``ValueError`` listing the names."""
    name = current_name(name)
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
    name = current_name(name)
    cls = reward_class(name)
    allowed = reward_params(name)
    unknown = sorted(str(k) for k in params if k not in allowed)
    if unknown:
        raise ValueError(f"reward {name!r} takes {list(allowed)}, not {unknown[:20]}")
    return cls(**params)
