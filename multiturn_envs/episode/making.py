"""How an env is made: :func:`make_env` and :class:`EnvMaker`, the one place that decides
Gymnasium's env checker.

``gym.make`` wraps every env in Gymnasium's ``PassiveEnvChecker``, which inspects the first
``reset`` and ``step`` of each instance (about 15 ms for a text env, and a warning for anything
it dislikes). A run needs it once, not per instance: the harness checks the first env of a run
and no other, the adapters and the training stack check none (their envs are the registered
ones, which the conformance tests check), an interactive user gets Gymnasium's default. Every
place that makes an env says which by one argument, ``checker``, here.

:class:`EnvMaker` is the same as a value: a frozen, picklable zero-argument factory (env id,
``gym.make`` keyword arguments, checker) in the spirit of Gymnasium's ``EnvSpec``, for whatever
builds envs later or elsewhere (a server's worker processes, a trainer's rollout pool, a
framework's per-episode env).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

__all__ = ["EnvMaker", "make_env"]


def make_env(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, checker: bool = False
) -> gym.Env[str, str]:
    """``gym.make(env_id, **env_kwargs)``, with Gymnasium's passive env checker only when
    ``checker`` (default off: see the module docstring for who turns it on).

    The MT/* ids are registered by importing any part of :mod:`multiturn_envs`, so they are
    always known here; a user's id must be registered (or ``"module:Id"``) as for ``gym.make``.
    """
    return gym.make(env_id, disable_env_checker=not checker, **dict(env_kwargs or {}))


@dataclass(frozen=True)
class EnvMaker:
    """A zero-argument factory of fresh envs: ``EnvMaker("MT/FrozenLake-v0", {"max_turns":
    8})()`` is :func:`make_env` with those arguments.

    A value, not a closure: it pickles (a worker process or a Ray actor gets it whole), it
    compares equal to another of the same arguments, and :meth:`to_dict` is JSON when the
    keyword arguments are.

    Attributes:
        env_id: a registered env id.
        env_kwargs: ``gym.make`` keyword arguments (copied at construction).
        checker: run Gymnasium's passive env checker on each env made.
    """

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    checker: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or not self.env_id:
            raise ValueError(f"env_id must be a registered env id, got {self.env_id!r:.100}")
        if not isinstance(self.env_kwargs, Mapping):
            raise ValueError(
                f"env_kwargs must be a mapping of gym.make arguments, got "
                f"{type(self.env_kwargs).__name__}"
            )
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))

    def __call__(self) -> gym.Env[str, str]:
        return make_env(self.env_id, self.env_kwargs, checker=self.checker)

    def with_kwargs(self, **env_kwargs: Any) -> EnvMaker:
        """The same maker with some keyword arguments added or replaced."""
        return EnvMaker(self.env_id, {**self.env_kwargs, **env_kwargs}, self.checker)

    def to_dict(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "env_kwargs": dict(self.env_kwargs), "checker": self.checker}
