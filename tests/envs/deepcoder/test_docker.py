"""The quality bars on the real docker backend (required under ``CI=true``)."""

from __future__ import annotations

import numpy as np
import pytest

from multiturn_envs.envs.deepcoder.env import DeepCoderEnv
from multiturn_envs.envs.deepcoder.tasks import BundledSource

pytestmark = pytest.mark.docker


def test_all_humaneval_canonical_solutions_pass_in_docker(docker_backend: str) -> None:
    env = DeepCoderEnv(dataset="humaneval", backend=docker_backend)
    try:
        failed = []
        for task_id in env.task_ids():
            env.reset(seed=0, options={"task_id": task_id})
            if env.score_action(env.expert_action()) != 1.0:
                failed.append(task_id)
        assert failed == [], f"canonical solutions failing in docker: {failed}"
    finally:
        env.close()


def test_bundled_references_pass_and_errors_fail_in_docker(docker_backend: str) -> None:
    env = DeepCoderEnv(backend=docker_backend, max_turns=3)
    try:
        for k, task_id in enumerate(BundledSource().task_ids()):
            env.reset(seed=0, options={"task_id": task_id})
            assert env.score_action(env.expert_action()) == 1.0, task_id
            error = env.error_action(np.random.default_rng(k))
            assert "return None" not in error and env.score_action(error) < 1.0, task_id
            _, _, terminated, _, _ = env.step(error)
            assert not terminated
    finally:
        env.close()
