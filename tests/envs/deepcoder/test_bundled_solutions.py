"""Quality bar: every bundled reference passes all its tests; every injected error fails one.

Run for real on the local backend (and on docker in ``test_docker.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from multiturn_envs.envs.deepcoder.env import DeepCoderEnv, extract_program
from multiturn_envs.envs.deepcoder.mutations import fallback_wrong_program, mutants
from multiturn_envs.envs.deepcoder.tasks import BundledSource

BUNDLED = BundledSource().task_ids()


@pytest.mark.parametrize("task_id", BUNDLED)
def test_reference_passes_and_error_action_fails(local_env: DeepCoderEnv, task_id: str) -> None:
    env = local_env
    env.reset(seed=0, options={"task_id": task_id})
    expert = env.expert_action()
    assert env.score_action(expert) == 1.0, f"the reference of {task_id} fails a test"
    task = env.task
    for seed in (BUNDLED.index(task_id),):
        error = env.error_action(np.random.default_rng(seed))
        program = extract_program(error)
        assert program != fallback_wrong_program(task.style, task.fn_name), (
            f"no mutant of {task_id} fails a test"
        )
        assert program in {m.source for m in mutants(task.reference or "")}
        # Re-run it from scratch (not through the env's cache): it runs and fails >= 1 test.
        result = env._get_sandbox().run(task.program_for(program), task.tests, env.limits)
        assert result.error is None and not result.all_passed
        assert not any(r.timed_out for r in result.results)
        assert env.score_action(error) == pytest.approx(result.pass_rate)
