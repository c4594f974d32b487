"""The hypothesis state machine and strategies (issue 33) find what they are for.

Each broken env below breaks one rule of the contract the machine checks; the machine must
find it (and a sound env must pass). hypothesis is optional for the package: importing
``multiturn_envs.testing`` must not import it.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from multiturn_envs.core import StepOutcome
from multiturn_envs.testing import (
    GuessEnv,
    actions,
    degenerate_replies,
    oracle_actions,
    text_actions,
    text_env_machine,
    tool_calls,
)
from multiturn_envs.testing.template.env import LightsEnv
from multiturn_envs.tools import read_tool_calls


class ScoresTooHigh(GuessEnv):
    def _step(self, action: str) -> StepOutcome:
        out = super()._step(action)
        out.step_score = 1.5 if "7" in action else out.step_score
        return out


class ForgetsOnRestore(GuessEnv):
    def _set_state(self, state: Any) -> None:
        super()._set_state({**state, "lo": 0})  # the search range is not restored


class ClosesOnce(GuessEnv):
    def close(self) -> None:  # overrides the base's guard: a second close fails
        if getattr(self, "_gone", False):
            raise RuntimeError("closed twice")
        self._gone = True
        super().close()


class OverBudget(GuessEnv):
    def step(self, action: Any) -> Any:
        out = list(super().step(action))
        out[3] = False  # never truncates: the budget is not what it says
        return tuple(out)


def _run(machine: Any, *, shrink: bool = True) -> None:
    from hypothesis import Phase
    from hypothesis.stateful import run_state_machine_as_test

    phases = list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate]
    run_state_machine_as_test(
        machine, settings=settings(max_examples=40, deadline=None, phases=phases)
    )


@pytest.mark.parametrize("env", [ScoresTooHigh, ForgetsOnRestore, ClosesOnce, OverBudget])
def test_the_machine_finds_a_broken_rule(env: type[GuessEnv]) -> None:
    with pytest.raises((AssertionError, RuntimeError)):
        _run(text_env_machine(lambda: env(max_turns=4)), shrink=False)


@pytest.mark.parametrize("make", [lambda: GuessEnv(max_turns=4), lambda: LightsEnv(max_turns=3)])
def test_a_sound_env_passes(make: Any) -> None:
    _run(text_env_machine(make))


def test_the_machine_runs_without_a_budget_too() -> None:
    _run(text_env_machine(lambda: GuessEnv(max_turns=None), task_ids=["secret-0", "secret-15"]))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_tool_calls_follow_the_schema_or_are_named_wrong(data: Any) -> None:
    env = LightsEnv()
    env.reset(seed=0, options={"task_id": "lights-4a"})
    text = data.draw(tool_calls(env))
    read = read_tool_calls(text, env.tools(), max_calls=4, strict=False)
    assert read and read[0].name in ("toggle", "no_such_tool")


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_text_and_oracle_actions_are_the_env_s_own(data: Any) -> None:
    env = LightsEnv()
    env.reset(seed=0, options={"task_id": "lights-5a"})
    assert data.draw(text_actions(env)) in env.valid_actions()
    move = data.draw(oracle_actions(env))
    assert move in env.valid_actions()
    assert env.score_action(move) in (0.0, 1.0)
    assert isinstance(data.draw(actions(env)), str)


@settings(max_examples=60, deadline=None)
@given(reply=degenerate_replies())
def test_degenerate_replies_are_turns_not_exceptions(reply: str) -> None:
    for env in (GuessEnv(max_turns=2), LightsEnv(max_turns=2)):
        env.reset(seed=0, options={"task_id": env.task_ids()[0]})
        *_, info = env.step(reply)
        assert 0.0 <= info["step_score"] <= 1.0
        env.close()


def test_the_oracle_strategy_needs_a_live_episode() -> None:
    env = GuessEnv(max_turns=1)
    env.reset(seed=0, options={"task_id": "secret-3"})
    env.step("guess 9")
    assert env.done
    assert find(oracle_actions(env), lambda _: True) == ""  # over: nothing to ask the oracle
    assert env.error_action(np.random.default_rng(0))  # the env's own hook is unchanged


def test_testing_imports_without_hypothesis() -> None:
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "import multiturn_envs.testing as t\n"
        "assert callable(t.text_env_machine) and callable(t.actions)\n"
        "try:\n    t.degenerate_replies()\nexcept ImportError:\n    print('needs hypothesis')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.strip() == "needs hypothesis"
