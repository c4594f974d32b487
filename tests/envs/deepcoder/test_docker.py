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


def test_envs_share_the_process_pool_unless_private(docker_backend: str) -> None:
    from multiturn_envs.sandbox.docker_pool import DockerSandbox

    envs = [DeepCoderEnv(backend=docker_backend, max_turns=2) for _ in range(3)]
    private = DeepCoderEnv(backend=docker_backend, max_turns=2, sandbox_pool="private")
    try:
        for env in (*envs, private):
            env.reset(seed=0)
            assert env.score_action(env.expert_action()) == 1.0
        pools = {id(env._sandbox) for env in envs}
        assert len(pools) == 1 and envs[0]._sandbox is DockerSandbox.shared()
        assert private._sandbox is not envs[0]._sandbox
        shared = envs[0]._sandbox
        assert isinstance(shared, DockerSandbox)
        envs[0].close()  # one env closing leaves the pool to the others
        assert not shared.closed and envs[1].score_action(envs[1].expert_action()) == 1.0
        own = private._sandbox
        private.close()
        assert isinstance(own, DockerSandbox) and own.closed
    finally:
        for env in (*envs, private):
            env.close()
        DockerSandbox.shutdown_shared()


def test_a_looping_submission_costs_one_limit_and_says_what_was_not_run(
    docker_backend: str,
) -> None:
    env = DeepCoderEnv(backend=docker_backend, max_turns=2, test_timeout_s=1.0)
    try:
        env.reset(seed=0)
        n = len(env.task.tests)
        assert n >= 2
        _, reward, _, _, info = env.step("```python\nwhile True:\n    pass\n```")
        assert reward == 0.0 and info["n_not_run"] == n - 1 and info["pass_rate"] == 0.0
        obs = env.messages()[-1]["content"]
        assert f"{n - 1} tests were not run (test 1 exceeded its time limit" in obs
        assert "### Test 1 failed" in obs and "time limit exceeded" in obs
    finally:
        env.close()
