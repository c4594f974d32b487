"""ErrorInjection: start the agent in an error state (k expert steps, then one wrong action).

This is how the study measures recovery: the agent receives the conversation so far, including
the injected mistake and the env's feedback on it, and must still solve the task within its own
budget. Injected turns are in ``messages()`` but do not count against the budget
(``info["prefix_turns"]`` says how many there were).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from multiturn_envs.wrappers.turn_budget import text_env_of

__all__ = ["ErrorInjection"]

_ERROR_INJECTION_STREAM = 0xE44
MAX_PREFIX_STEPS = 100_000
"""The longest expert prefix: each injected turn is kept in the episode's history, so an
absurd ``k`` would play (and store) turns until memory ran out on a task the expert cannot end."""


class ErrorInjection(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """On reset, play ``after_expert_steps`` expert actions and then one ``error_action``.

    Args:
        env: any MT/* env implementing ``expert_action`` and ``error_action``.
        after_expert_steps: ``k``, an int, or an inclusive ``(lo, hi)`` range drawn per reset.
        max_tries: a prefix that ends the episode (a slip into a hole, an expert step that
            already solves the task) is retried from a fresh reset this many times, then a
            ``RuntimeError`` says the task is too short for ``k``.
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        after_expert_steps: int | tuple[int, int] = 0,
        max_tries: int = 20,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, after_expert_steps=after_expert_steps, max_tries=max_tries
        )
        gym.Wrapper.__init__(self, env)
        lo, hi = (
            (after_expert_steps, after_expert_steps)
            if isinstance(after_expert_steps, int)
            else tuple(after_expert_steps)
        )
        if not 0 <= lo <= hi:
            raise ValueError(
                f"after_expert_steps must be >= 0 (or a range lo <= hi), got {after_expert_steps!r}"
            )
        if hi > MAX_PREFIX_STEPS:
            raise ValueError(
                f"after_expert_steps must be at most {MAX_PREFIX_STEPS} (each injected turn is "
                f"played and kept in the history), got {after_expert_steps!r}"
            )
        if not 1 <= max_tries <= MAX_PREFIX_STEPS:
            raise ValueError(f"max_tries must be in [1, {MAX_PREFIX_STEPS}], got {max_tries!r}")
        self.k_range = (int(lo), int(hi))
        self.max_tries = max_tries
        text_env_of(env)
        self._rng = np.random.default_rng()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(
                np.random.SeedSequence([seed, _ERROR_INJECTION_STREAM])
            )
        base = text_env_of(self.env)
        k = int(self._rng.integers(self.k_range[0], self.k_range[1] + 1))
        last_problem = ""
        for attempt in range(self.max_tries):
            self.env.reset(seed=seed if attempt == 0 else None, options=options)
            try:
                injected: list[str] = []
                for _ in range(k):
                    action = base.expert_action()
                    base.play_prefix(action)
                    injected.append(action)
                error = base.error_action(self._rng)
                base.play_prefix(error)
            except ValueError as exc:  # the prefix ended the episode: try a fresh start
                last_problem = str(exc)
                continue
            info = base.current_info()
            info["injected_actions"] = [*injected, error]
            info["error_action"] = error
            return base.current_observation(), info
        raise RuntimeError(
            f"could not inject an error after {k} expert steps in {self.max_tries} tries "
            f"(last: {last_problem}); use a smaller after_expert_steps for this task"
        )
