"""Every registered env, explored by the public state machine (issue 33).

:func:`multiturn_envs.testing.text_env_machine` with the strategies of
:mod:`multiturn_envs.testing.strategies`: well-formed moves, the oracle's, tool calls (right and
wrong) and degenerate replies, with resets, snapshots and restores interleaved. What a user's
env gets from two lines, our envs get too: exact budget, scores in [0, 1], snapshots that
replay, close twice. Examples are few where a step is costly (a program run, a container).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import multiturn_envs  # noqa: F401
from multiturn_envs.episode import make_env
from multiturn_envs.testing import require_terminal_image, text_env_machine

CASES: dict[str, tuple[dict[str, Any], list[str] | None, int]] = {
    "MT/FrozenLake-v0": ({"max_turns": 5}, ["4x4", "8x8", "map:SFH/FHF/FFG"], 30),
    "MT/InterCode-SQL-v0": ({"max_turns": 4}, None, 10),
    "MT/BFCL-v0": ({"max_turns": 4}, ["multi_turn_base_0", "multi_turn_base_1"], 4),
    "MT/DeepCoder-v0": ({"max_turns": 3, "backend": "local"}, None, 4),
    "MT/Terminal-v0": ({"max_turns": 3}, None, 3),
}
"""env id -> (make kwargs, the tasks a reset may load, examples)."""


def _run(machine: Any, examples: int) -> None:
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        machine, settings=settings(max_examples=examples, deadline=None, stateful_step_count=8)
    )


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_an_env_keeps_its_contract_under_any_replies(env_id: str) -> None:
    kwargs, tasks, examples = CASES[env_id]
    if env_id == "MT/Terminal-v0":
        require_terminal_image()
    if tasks is None:
        probe = make_env(env_id, kwargs)
        tasks = [str(t) for t in probe.unwrapped.task_ids()[:3]]  # type: ignore[attr-defined]
        probe.close()

    def make() -> gym.Env[str, str]:
        return make_env(env_id, kwargs)

    _run(text_env_machine(make, task_ids=tasks), examples)
