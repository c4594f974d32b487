"""Wrappers that work on every MT/* env: budgets, error injection, rewards."""

# The public names of these modules (their ``__all__``) are this package's.
from multiturn_envs.wrappers import (
    budget_mix,
    error_injection,
    process_reward,
    turn_budget,
    turn_reward,
)
from multiturn_envs.wrappers.budget_mix import *  # noqa: F403
from multiturn_envs.wrappers.error_injection import *  # noqa: F403
from multiturn_envs.wrappers.process_reward import *  # noqa: F403
from multiturn_envs.wrappers.turn_budget import *  # noqa: F403
from multiturn_envs.wrappers.turn_reward import *  # noqa: F403

__all__: list[str] = []
__all__ += budget_mix.__all__
__all__ += error_injection.__all__
__all__ += process_reward.__all__
__all__ += turn_budget.__all__
__all__ += turn_reward.__all__
