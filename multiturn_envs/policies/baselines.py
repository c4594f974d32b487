"""Baseline policies: uniform random, expert (the oracle) and noisy expert.

Baselines are how a user checks the harness without an LLM, and how the tests check the
metrics: the expert's Pass@(K,T) is known, the random policy's is low, and the noisy expert
interpolates between them with ``epsilon``.

Every baseline is a pure function of its :class:`TurnRequest`: the action depends only on the
env's current state and ``request.seed`` (unique per run, task, sample and turn), never on call
order, batch composition or a generator carried between calls. That is what makes a resumed run
reproduce the records of an uninterrupted one.

Speed matters here because the harness benchmark measures the harness with the random policy
against a bare ``env.step`` loop: creating a numpy ``Generator`` costs ~30 us, more than a
FrozenLake step. The seed the harness hands over is already a uniform 64-bit word drawn from a
``SeedSequence``, so when the env uses the base class's uniform ``random_action`` over a finite
``valid_actions()`` list, the baselines draw from the seed with a splitmix64 finaliser (exactly
uniform up to a bias below 2**-58) instead. Envs that override ``random_action`` (or have no
finite action set) get ``env.random_action(np.random.default_rng(seed))``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from multiturn_envs.core import TextEnv
from multiturn_envs.policies.base import (
    NO_TOKENS,
    AsyncPolicy,
    Policy,
    Reply,
    TurnRequest,
    as_policy,
)

__all__ = ["ExpertPolicy", "NoisyExpertPolicy", "RandomPolicy", "random_action"]

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a bijective avalanche mix of a 64-bit word."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def seed_words(seed: int, n: int) -> list[int]:
    """``n`` independent-looking 64-bit words derived from ``seed`` (splitmix64 stream)."""
    golden = 0x9E3779B97F4A7C15
    return [_mix64(seed + golden * (i + 1)) for i in range(n)]


def _uniform(word: int) -> float:
    """A float in [0, 1) from the top 53 bits of a 64-bit word."""
    return (word >> 11) * (1.0 / (1 << 53))


def random_action(env: TextEnv, seed: int) -> str:
    """A uniformly random action of ``env`` at its current state, determined by ``seed``."""
    if type(env).random_action is TextEnv.random_action:
        actions = env.valid_actions()
        if actions:
            return actions[seed_words(seed, 1)[0] % len(actions)]
    return env.random_action(np.random.default_rng(seed & _MASK64))


class RandomPolicy:
    """Uniformly random over the env's well-formed actions (``env.random_action``)."""

    name = "random"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        return [Reply(random_action(req.live_env(), req.seed), usage=NO_TOKENS) for req in requests]


class ExpertPolicy:
    """The env's oracle: ``env.expert_action()`` at every turn (ignores the seed)."""

    name = "expert"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        return [Reply(req.live_env().expert_action(), usage=NO_TOKENS) for req in requests]


class NoisyExpertPolicy:
    """The expert, except with probability ``epsilon`` a uniformly random action.

    The coin and the random action come from two different words derived from the turn seed,
    so the random action is independent of the coin.
    """

    def __init__(self, epsilon: float = 0.1) -> None:
        epsilon = float(epsilon)
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        self.epsilon = epsilon
        self.name = f"noisy-expert:{epsilon:g}"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        replies = []
        for req in requests:
            coin, action_seed = seed_words(req.seed, 2)
            if _uniform(coin) < self.epsilon:
                replies.append(
                    Reply(
                        random_action(req.live_env(), action_seed),
                        meta={"noise": 1},
                        usage=NO_TOKENS,
                    )
                )
            else:
                action = req.live_env().expert_action()
                replies.append(Reply(action, meta={"noise": 0}, usage=NO_TOKENS))
        return replies


BASELINE_NAMES: tuple[str, ...] = ("random", "expert", "noisy-expert[:eps]")


def baseline_from_name(spec: str) -> RandomPolicy | ExpertPolicy | NoisyExpertPolicy:
    """``"random"``, ``"expert"``, ``"noisy-expert"`` (eps 0.1) or ``"noisy-expert:0.3"``."""
    name, _, arg = spec.partition(":")
    if name == "random" and not arg:
        return RandomPolicy()
    if name == "expert" and not arg:
        return ExpertPolicy()
    if name == "noisy-expert":
        if not arg:
            return NoisyExpertPolicy()
        try:
            eps = float(arg)
        except ValueError:
            raise ValueError(f"noisy-expert epsilon must be a number, got {arg!r}") from None
        return NoisyExpertPolicy(eps)
    raise ValueError(f"unknown baseline {spec!r}; known: {', '.join(BASELINE_NAMES)}")


def load_policy(spec: str) -> Policy | AsyncPolicy:
    """Resolve a policy spec: a baseline name, or ``"package.module:attr"``.

    ``attr`` (dots allowed) may be a policy instance, a policy class (instantiated without
    arguments), or a plain ``fn(observation) -> str`` (adapted by :func:`as_policy`). Errors
    are ``ValueError`` with one clear sentence, for the CLI to print.
    """
    if ":" not in spec or spec.partition(":")[0] in ("random", "expert", "noisy-expert"):
        return baseline_from_name(spec)
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ValueError(f"a policy spec is 'module:attr', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import policy module {module_name!r}: {exc}") from None
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(obj, type):
        obj = obj()
    try:
        return as_policy(obj)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
