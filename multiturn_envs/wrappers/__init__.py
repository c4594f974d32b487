"""Wrappers that work on every MT/* env: budgets and error injection."""

from multiturn_envs.wrappers.budget_mix import BudgetMix
from multiturn_envs.wrappers.error_injection import ErrorInjection
from multiturn_envs.wrappers.turn_budget import TurnBudget, text_env_of

__all__ = ["BudgetMix", "ErrorInjection", "TurnBudget", "text_env_of"]
