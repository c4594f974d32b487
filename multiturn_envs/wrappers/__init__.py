"""Wrappers that work on every MT/* env: budgets, error injection, rewards."""

from multiturn_envs.wrappers.budget_mix import BudgetMix
from multiturn_envs.wrappers.error_injection import ErrorInjection
from multiturn_envs.wrappers.process_reward import ProcessReward
from multiturn_envs.wrappers.turn_budget import TurnBudget, text_env_of, with_budget
from multiturn_envs.wrappers.turn_reward import TurnReward

__all__ = [
    "BudgetMix",
    "ErrorInjection",
    "ProcessReward",
    "TurnBudget",
    "TurnReward",
    "text_env_of",
    "with_budget",
]
