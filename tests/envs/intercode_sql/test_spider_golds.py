"""On the real converted Spider dev databases: golds score 1 in both modes, errors below 1."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv
from multiturn_envs.testing import require

HAVE_INTERCODE = importlib.util.find_spec("intercode") is not None


@pytest.mark.parametrize("scoring", ["exact", "intercode"])
@pytest.mark.parametrize("tasks", ["intercode", "bundled"])
def test_golds_score_one_and_injected_errors_below(scoring: str, tasks: str) -> None:
    if tasks == "intercode":
        require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks=tasks, scoring=scoring, max_turns=10)
    rng = np.random.default_rng(7)
    try:
        for task_id in env.task_ids():
            env.reset(seed=0, options={"task_id": task_id})
            assert env.score_action(env.expert_action()) == 1.0, task_id
            for _ in range(3):
                wrong = env.error_action(rng)
                assert env.score_action(wrong) < 1.0, (task_id, wrong)
            _, _, terminated, _, info = env.step(env.error_action(rng))
            assert not terminated and not info["query_error"], task_id
    finally:
        env.close()


def test_error_actions_are_edits_of_the_gold_on_spider() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks="intercode")
    rng = np.random.default_rng(0)
    edited = 0
    for task_id in env.task_ids():
        env.reset(options={"task_id": task_id})
        wrong = env.error_action(rng)
        # a one-edit variant of the gold, not a stand-in (unless no edit can differ from an
        # empty gold result)
        edited += wrong not in env._fallbacks[task_id] or not env.gold_result().rows
    env.close()
    assert edited == len(env.task_ids())
