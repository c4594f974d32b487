"""A hypothesis state machine that checks the env contract on any ``TextEnv``.

:func:`~multiturn_envs.testing.check_text_env` probes a few fixed trajectories; this explores
many, with the actions of :mod:`.strategies` (well-formed moves, the oracle's, tool calls right
and wrong, degenerate replies), resets, snapshots and restores interleaved as hypothesis
chooses, and shrinks a failure to the shortest sequence that shows it. A user's env is checked
in two lines::

    from multiturn_envs.testing import text_env_machine

    TestMyEnvDynamics = text_env_machine(lambda: MyEnv(max_turns=5)).TestCase

What every step of every run must hold:

* **the budget is exact**: ``turn`` counts the steps since the reset, never past ``max_turns``;
  the step that spends the budget is ``truncated`` (unless it ``terminated``), no earlier one
  is, and stepping after the end raises :class:`~multiturn_envs.errors.EpisodeOver`;
* **types and scores**: the observation is a ``str``, the reward a finite ``float``, the flags
  Python bools, ``step_score`` in [0, 1], ``info`` has the contract's keys;
* **snapshots are exact**: an env restored with ``set_state`` (a fresh one, reset first so
  that Gymnasium's wrappers let it step) reports the same state, and the same actions played
  on it give the same trajectory (observations, rewards, flags and ``info``; a wrapper that
  keeps its own per-episode state is not part of a snapshot: check the base env);
* **close is idempotent**: every env made is closed twice at the end.

hypothesis is imported when a machine is built: importing :mod:`multiturn_envs.testing` never
needs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from multiturn_envs.core import TextEnv
from multiturn_envs.errors import EpisodeOver
from multiturn_envs.testing.conformance import REQUIRED_INFO_KEYS
from multiturn_envs.testing.strategies import actions as all_actions

__all__ = ["text_env_machine"]


def _base(env: gym.Env[Any, Any]) -> TextEnv:
    base = env.unwrapped
    assert isinstance(base, TextEnv), f"{type(base).__name__} is not a multiturn_envs.TextEnv"
    return base


def _same(a: Any, b: Any) -> bool:
    return bool(gym.utils.env_checker.data_equivalence(a, b))


def check_step(out: tuple[Any, ...], turn: int, budget: int | None, where: str = "") -> None:
    """The contract of one ``step``'s return, the ``turn``-th since the reset."""
    observation, reward, terminated, truncated, info = out
    assert isinstance(observation, str), f"{where}observation is {type(observation).__name__}"
    assert isinstance(reward, float) and math.isfinite(reward), f"{where}reward {reward!r}"
    assert type(terminated) is bool and type(truncated) is bool, f"{where}flags must be bools"
    for key, types in REQUIRED_INFO_KEYS.items():
        assert isinstance(info.get(key), types), f"{where}info[{key!r}] = {info.get(key)!r}"
    score = info.get("step_score")
    assert isinstance(score, float) and 0.0 <= score <= 1.0, f"{where}step_score {score!r}"
    assert info["turn"] == turn, f"{where}info['turn'] is {info['turn']}, {turn} steps taken"
    if budget is not None:
        assert turn <= budget, f"{where}turn {turn} past the budget of {budget}"
        spent = turn == budget
        assert truncated == (spent and not terminated), (
            f"{where}turn {turn} of {budget}: truncated={truncated}, terminated={terminated}"
        )
        assert info["turns_left"] == budget - turn, f"{where}turns_left {info['turns_left']}"
    else:
        assert not truncated, f"{where}truncated without a budget"


def text_env_machine(
    make_env: Callable[[], gym.Env[str, str]],
    *,
    task_ids: Sequence[str] | None = None,
    actions: Callable[[TextEnv], Any] | None = None,
    max_examples: int | None = None,
    steps: int = 12,
) -> Any:
    """A ``RuleBasedStateMachine`` class checking the env contract on envs of ``make_env``
    (module docstring); its ``.TestCase`` is a ``unittest.TestCase`` pytest collects.

    Args:
        make_env: builds a fresh env (wrapped or not).
        task_ids: the tasks a reset may load (default: every task of the env).
        actions: ``env -> strategy`` of the replies to try (default:
            :func:`multiturn_envs.testing.strategies.actions`).
        max_examples: runs to explore (default: the active hypothesis profile's).
        steps: the most rules one run applies (resets, steps, snapshots, replays).
    """
    from hypothesis import settings
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        initialize,
        invariant,
        precondition,
        rule,
    )

    draw_actions = actions or all_actions

    class TextEnvMachine(RuleBasedStateMachine):
        """The env contract, explored (:func:`text_env_machine`)."""

        def __init__(self) -> None:
            super().__init__()
            self.env = make_env()
            self.base = _base(self.env)
            self.made: list[gym.Env[str, str]] = [self.env]
            self.budget: int | None = None
            self.played: list[tuple[str, tuple[Any, ...]]] = []
            self.snapshot: tuple[dict[str, Any], int] | None = None

        @initialize(seed=st.integers(0, 2**31 - 1), which=st.integers(0, 2**16))
        def start(self, seed: int, which: int) -> None:
            self.reset(seed, which)

        @rule(seed=st.integers(0, 2**31 - 1), which=st.integers(0, 2**16))
        def reset(self, seed: int, which: int) -> None:
            ids = list(task_ids) if task_ids is not None else list(self.base.task_ids())
            observation, info = self.env.reset(
                seed=seed, options={"task_id": ids[which % len(ids)]}
            )
            assert isinstance(observation, str) and info["turn"] == 0
            self.budget = info["max_turns"]
            self.played, self.snapshot = [], None

        @rule(data=st.data())
        def step(self, data: Any) -> None:
            if self.base.done:
                try:
                    self.env.step("after the end")
                except EpisodeOver:
                    return
                raise AssertionError("a step after the episode's end did not raise EpisodeOver")
            action = data.draw(draw_actions(self.base), label="action")
            out = self.env.step(action)
            check_step(out, len(self.played) + 1, self.budget)
            self.played.append((action, out))

        def _restored(self, state: dict[str, Any]) -> gym.Env[str, str]:
            """A fresh env in ``state``: reset (so wrappers such as Gymnasium's order checks
            let it step), then the base restored; checked to report the same state."""
            twin = make_env()
            self.made.append(twin)
            twin.reset(seed=0, options={"task_id": state.get("task_id")})
            _base(twin).set_state(state)
            assert _same(_base(twin).get_state(), state), "get_state after set_state differs"
            return twin

        @rule()
        def take_snapshot(self) -> None:
            state = self.base.get_state()
            self.snapshot = (state, len(self.played))
            self._restored(state).close()

        @precondition(lambda self: self.snapshot is not None)
        @rule()
        def restore_and_replay(self) -> None:
            assert self.snapshot is not None
            state, at = self.snapshot
            twin = self._restored(state)
            for action, recorded in self.played[at:]:
                again = twin.step(action)
                assert _same(again, recorded), (
                    f"after set_state, {action!r:.60} gave another outcome than it did"
                )
            twin.close()

        @invariant()
        def within_budget(self) -> None:
            if self.budget is not None and self.base.task_id is not None:
                assert self.base.turn <= self.budget, "more turns than the budget"

        def teardown(self) -> None:
            for env in self.made:
                env.close()
                env.close()  # idempotent

    overrides: dict[str, Any] = {"stateful_step_count": steps, "deadline": None}
    if max_examples is not None:
        overrides["max_examples"] = max_examples
    TextEnvMachine.TestCase.settings = settings(**overrides)
    return TextEnvMachine
