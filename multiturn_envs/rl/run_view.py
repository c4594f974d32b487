"""What a training run sees of its env, computed once: :class:`RunView`.

A training run, the start model's build and warm start, the evaluation of the trained model
and the study all need the same view of a :class:`~multiturn_envs.rl.config.TrainConfig`'s
env: the training tasks, the system prompt of the rows, the tools TRL renders (the generic
``act`` tool or the env's typed tools), the TRL environment class and how to make the run's
env (the budget: fixed T, or ``BudgetMix``). :meth:`RunView.of` asks one env these questions
and closes it; the frozen answer is passed to SFT, GRPO and the evaluation, so none of them
builds an env to ask again. Envs are made only to be played (a rollout, an SFT episode), and
whoever makes one closes it: :class:`Environments` closes the TRL environments of a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import gymnasium as gym

from multiturn_envs.adapters.trl import (
    TRLEnvironment,
    TRLEnvironmentBase,
    close_environment,
    row_system_prompt,
    tool_functions,
    trl_environment_class,
)
from multiturn_envs.episode import EnvMaker
from multiturn_envs.rewards import Reward
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.tool_format import ACT_LAYOUT, ToolLayout
from multiturn_envs.tools import Tool
from multiturn_envs.wrappers import BudgetMix
from multiturn_envs.wrappers.turn_budget import text_env_of

__all__ = ["Environments", "RunView"]


@dataclass(frozen=True)
class RunView:
    """One run's view of its env, asked once (:meth:`of`).

    Attributes:
        config: the run.
        tasks: the training tasks (the config's, else every task of the env).
        system_prompt: the system message of the run's rows (generic layout: the env's
            prompt plus the tool hint; typed: the env's ``tool_system_prompt``).
        layout: how turns map onto tools: the generic ``act`` tool, or the env's typed tools
            (read after a reset on the first training task).
        environment_class: the TRL environment class of the run (``TRLEnvironment``, or the
            typed-tools one).
        maker: makes the run's env: ``gym.make`` of the config's env with ``max_turns`` =
            the largest budget (:meth:`make_env` adds ``BudgetMix`` when configured).
    """

    config: TrainConfig
    tasks: tuple[str, ...]
    system_prompt: str
    layout: ToolLayout
    environment_class: type[TRLEnvironmentBase]
    maker: EnvMaker

    @classmethod
    def of(cls, config: TrainConfig) -> RunView:
        """The view of ``config``: one env made, asked, and closed."""
        maker = EnvMaker(config.env_id, {**config.env_kwargs, "max_turns": config.max_budget})
        env = maker()
        try:
            base = text_env_of(env)
            system = row_system_prompt(env, config.tools)
            tasks = tuple(str(t) for t in (config.train_tasks or base.task_ids()))
            layout = ACT_LAYOUT
            if config.tools != "act":
                env.reset(seed=0, options={"task_id": tasks[0]})
                layout = ToolLayout(tools=tuple(base.tools()))
        finally:
            env.close()
        environment_class = (
            TRLEnvironment if config.tools == "act" else trl_environment_class(layout.tools)
        )
        return cls(config, tasks, system, layout, environment_class, maker)

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The env's typed tools (empty in the generic layout)."""
        return self.layout.tools

    @property
    def reward(self) -> Reward:
        """The run's reward (what each rollout's ``get_reward`` scores)."""
        return self.config.make_reward()

    def make_env(self, *, mix: bool = False) -> gym.Env[str, str]:
        """A fresh env of the run (the caller closes it); ``mix``: wrapped in the configured
        ``BudgetMix``, as rollouts see it."""
        env = self.maker()
        if mix and self.config.budget_mix:
            env = BudgetMix(
                env, budgets=self.config.budget_mix, weights=self.config.budget_mix_weights
            )
        return env

    def tool_functions(self) -> list[Callable[..., str]]:
        """The tools TRL renders for the run (``act``, or the typed methods), for chat
        templates, SFT and evaluation; rendered from the class, no env made."""
        return tool_functions(self.environment_class)

    def environment(self) -> TRLEnvironmentBase:
        """One TRL environment of the run (its own env, ``BudgetMix`` included), scoring
        rollouts with the run's reward; close it with
        :func:`~multiturn_envs.adapters.trl.close_environment`."""
        return self.environment_class(self.make_env(mix=True), reward=self.reward)


class Environments:
    """The ``environment_factory`` of a run: makes TRL environments of a :class:`RunView`
    (TRL pools and reuses them) and closes every one it made, at :meth:`close` or at the end
    of a ``with`` block, so no env (or sandbox behind it) outlives its run."""

    def __init__(self, view: RunView) -> None:
        self.view = view
        self.made: list[TRLEnvironmentBase] = []

    def __call__(self) -> TRLEnvironmentBase:
        environment = self.view.environment()
        self.made.append(environment)
        return environment

    def close(self) -> None:
        while self.made:
            close_environment(self.made.pop())

    def __enter__(self) -> Environments:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
