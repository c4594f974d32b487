"""What TRL's rollouts see: the env of a run, its tools and its TRL environment class.

A training run, the start model's build and warm start, the study and the trained-model policy
all need the same view of a :class:`~multiturn_envs.rl.config.TrainConfig`'s env: the budget
(fixed T or ``BudgetMix``), the training tasks, the system prompt of the rows, and the tools
TRL renders (the generic ``act`` tool or the env's typed tools). This module is that one view,
so each of them builds it the same way.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import multiturn_envs  # noqa: F401  (registers the MT/* ids)
from multiturn_envs.adapters.trl import (
    TRLEnvironment,
    TRLEnvironmentBase,
    grpo_rows,
    trl_environment_class,
)
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.tool_format import ACT_LAYOUT, ToolLayout
from multiturn_envs.wrappers import BudgetMix
from multiturn_envs.wrappers.turn_budget import text_env_of

__all__ = [
    "act_tool",
    "env_tools",
    "environment",
    "environment_class",
    "layout",
    "make_train_env",
    "system_prompt",
    "tool_callables",
    "train_tasks",
]


def make_train_env(config: TrainConfig, *, mix: bool = True) -> gym.Env[str, str]:
    """The env of a run: ``max_turns`` = the (largest) budget; ``BudgetMix`` when configured."""
    kwargs = {**config.env_kwargs, "max_turns": config.max_budget}
    env: gym.Env[str, str] = gym.make(config.env_id, disable_env_checker=True, **kwargs)
    if mix and config.budget_mix:
        env = BudgetMix(env, budgets=config.budget_mix, weights=config.budget_mix_weights)
    return env


def env_tools(config: TrainConfig) -> tuple[Any, ...]:
    """The env's typed tools (after a reset on its first training task)."""
    env = make_train_env(config, mix=False)
    try:
        base = text_env_of(env)
        env.reset(seed=0, options={"task_id": train_tasks(config)[0]})
        return tuple(base.tools())
    finally:
        env.close()


def layout(config: TrainConfig) -> ToolLayout:
    """The run's tool layout: the generic ``act`` tool or the env's typed tools."""
    return ACT_LAYOUT if config.tools == "act" else ToolLayout(tools=env_tools(config))


def environment_class(config: TrainConfig) -> type[TRLEnvironmentBase]:
    """The TRL environment class of the run (``TRLEnvironment`` or the typed-tools one)."""
    if config.tools == "act":
        return TRLEnvironment
    return trl_environment_class(env_tools(config))


def environment(config: TrainConfig, cls: type[TRLEnvironmentBase] | None = None) -> Any:
    """One TRL environment of the run, scoring rollouts with the run's reward."""
    cls = cls or environment_class(config)
    return cls(make_train_env(config), reward=config.make_reward())


def train_tasks(config: TrainConfig) -> list[str]:
    if config.train_tasks:
        return list(config.train_tasks)
    env = make_train_env(config, mix=False)
    try:
        return [str(t) for t in text_env_of(env).task_ids()]
    finally:
        env.close()


def system_prompt(config: TrainConfig) -> str:
    """The system message of the run's rows (generic layout: the env's prompt plus the tool
    hint; typed: the env's ``tool_system_prompt``)."""
    env = make_train_env(config, mix=False)
    try:
        return str(grpo_rows(env, ["x"], tools=config.tools)[0]["prompt"][0]["content"])
    finally:
        env.close()


def act_tool(config: TrainConfig) -> Any:
    """The ``act`` tool as TRL renders it (for templates, SFT schemas, evaluation)."""
    return TRLEnvironment(make_train_env(config, mix=False)).act


def tool_callables(config: TrainConfig) -> list[Any]:
    """The tools TRL renders for the run, as callables (``act``, or the typed methods)."""
    if config.tools == "act":
        return [act_tool(config)]
    instance = environment(config)
    return [getattr(instance, name) for name in _tool_names(type(instance))]


def _tool_names(cls: type) -> list[str]:
    import inspect

    return [
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]
