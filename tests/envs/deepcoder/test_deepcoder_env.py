"""MT/DeepCoder-v0: the env contract, feedback, oracle hooks and snapshots (local backend)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import multiturn_envs  # noqa: F401 (registers MT/*)
from multiturn_envs.envs.deepcoder.env import DeepCoderEnv, clip, extract_program
from multiturn_envs.sandbox.base import RunLimits, RunResult, Sandbox, TestCase, TestResult
from multiturn_envs.testing import check_text_env
from multiturn_envs.wrappers.error_injection import ErrorInjection

STDIO = "bundled/gcd-lcm"
FUNCTIONAL = "bundled/two-sum"
SOLUTION_CLASS = "bundled/climb-stairs"

MakeEnv = Callable[..., DeepCoderEnv]


def test_conformance(make_env: MakeEnv) -> None:
    check_text_env(
        lambda: make_env(max_turns=4), task_ids=[STDIO, SOLUTION_CLASS], seeds=(0,), n_steps=2
    )


def test_gym_make_registered_and_spec_rebuilds() -> None:
    env = gym.make(
        "MT/DeepCoder-v0", max_turns=3, backend="local", dataset_options={"style": "stdio"}
    )
    try:
        assert env.spec is not None and env.spec.max_episode_steps is None
        again = gym.make(copy.deepcopy(env.spec))
        obs, info = again.reset(seed=3)
        assert info["task_id"].startswith("bundled/") and "stdin" in obs
        again.close()
    finally:
        env.close()


def test_backend_must_be_a_name() -> None:
    with pytest.raises(TypeError, match="name"):
        DeepCoderEnv(backend=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend"):
        DeepCoderEnv(backend="kubernetes")


def test_first_observation_has_statement_format_and_answer(make_env: MakeEnv) -> None:
    env = make_env()
    obs, _ = env.reset(seed=0, options={"task_id": STDIO})
    assert obs.startswith("GCD and LCM") and "### Format:" in obs and "stdin" in obs
    assert "# YOUR CODE HERE" in obs and obs.endswith("(use the provided format with backticks)")
    obs, _ = env.reset(seed=0, options={"task_id": SOLUTION_CLASS})
    assert "class Solution:" in obs and "def climbStairs" in obs


def test_sandbox_starts_lazily_and_close_releases(make_env: MakeEnv) -> None:
    env = make_env()
    env.reset(seed=0, options={"task_id": STDIO})
    assert env._sandbox is None
    env.step("not python at all (")  # does not compile: nothing runs
    assert env._sandbox is None
    env.step("print(1)")
    assert env._sandbox is not None
    env.close()
    assert env._sandbox is None
    env.close()


def test_feedback_lists_failures_with_fields(make_env: MakeEnv) -> None:
    env = make_env(max_feedback_failures=1, feedback_chars=40)
    env.reset(seed=0, options={"task_id": STDIO})
    obs, reward, terminated, truncated, info = env.step("```python\nprint('1 ' + 'x' * 100)\n```")
    assert not terminated and not truncated and reward == 0.0
    assert info["n_passed"] == 0 and info["n_tests"] == 7 and info["step_score"] == 0.0
    assert obs.count("### Test") == 1 and "(6 more failing tests not shown.)" in obs
    for field in ("Input:", "Expected:", "Actual:", "Error:"):
        assert field in obs
    assert "...(truncated)..." in obs
    assert "Passed 0 of 7 tests." in obs


def test_partial_pass_rate_and_success_terminates(make_env: MakeEnv) -> None:
    env = make_env(max_turns=5)
    env.reset(seed=0, options={"task_id": FUNCTIONAL})
    # right only when the pair is the first two elements: tests 1, 3 and 7 of 7
    _, _, terminated, _, info = env.step("def two_sum(nums, target):\n    return [0, 1]\n")
    assert not terminated and info["n_passed"] == 3 and info["step_score"] == pytest.approx(3 / 7)
    obs, reward, terminated, _, info = env.step(env.expert_action())
    assert terminated and reward == 1.0 and info["success"] and info["step_score"] == 1.0
    assert "All 7 tests passed" in obs


def test_runtime_error_feedback_is_deterministic_across_envs(make_env: MakeEnv) -> None:
    program = "def two_sum(nums, target):\n    return nums[99]\n"
    observations = []
    for _ in range(2):
        env = make_env()
        env.reset(seed=0, options={"task_id": FUNCTIONAL})
        observations.append(env.step(program)[0])
    assert observations[0] == observations[1]
    assert "IndexError" in observations[0] and "mte-local" not in observations[0]


def test_pass_rate_reward_and_public_feedback(make_env: MakeEnv) -> None:
    env = make_env(reward="pass_rate", feedback_tests="public")
    env.reset(seed=0, options={"task_id": STDIO})
    assert env._public == (0,)  # only the example's input appears in the statement
    obs, reward, *_ = env.step("a, b = map(int, input().split())\nprint(1, a * b)\n")
    assert reward == pytest.approx(4 / 7)  # right only when the gcd is 1
    assert obs.count("### Test") == 1 and "### Test 1 failed" in obs


def test_unrunnable_replies_cost_a_turn_and_say_why(make_env: MakeEnv) -> None:
    env = make_env(max_turns=4, max_program_chars=1000)
    env.reset(seed=0, options={"task_id": STDIO})
    obs, _, _, _, info = env.step("")
    assert info["parse_error"] and "No program found" in obs and info["turns_left"] == 3
    obs, _, _, _, info = env.step("```python\ndef f(:\n```")
    assert not info["parse_error"] and not info["compiled"] and "SyntaxError" in obs
    obs, _, _, _, info = env.step("x = 1\n" * 500)
    assert "the limit is 1000" in obs and info["step_score"] == 0.0
    obs, _, _, truncated, info = env.step("print('\ud800')")
    assert truncated and "surrogate" in obs


def test_score_action_leaves_the_episode_alone(make_env: MakeEnv) -> None:
    env = make_env(max_turns=3)
    env.reset(seed=0, options={"task_id": FUNCTIONAL})
    env.step("def two_sum(nums, target):\n    return [0, 1]\n")
    before = env.get_state()
    assert env.score_action(env.expert_action()) == 1.0
    assert env.score_action("garbage (") == 0.0
    assert env.get_state() == before and env.turn == 1


def test_snapshot_restores_onto_a_fresh_env(make_env: MakeEnv) -> None:
    env = make_env(max_turns=4)
    env.reset(seed=0, options={"task_id": STDIO})
    env.step("print(1, 1)")
    snapshot = env.get_state()
    later = env.step(env.expert_action())
    other = make_env(max_turns=4)
    other.reset(seed=5, options={"task_id": FUNCTIONAL})
    other.set_state(snapshot)
    assert other.task.task_id == STDIO and other.messages() == env.messages()[:3]
    assert other.step(env.expert_action()) == later


def test_error_action_is_deterministic_and_never_ends(make_env: MakeEnv) -> None:
    env = make_env(max_turns=3)
    env.reset(seed=0, options={"task_id": "bundled/edit-distance"})
    picks = {env.error_action(np.random.default_rng(s)) for s in range(6)}
    assert len(picks) >= 2, "the generator should matter"
    again = make_env(max_turns=3)
    again.reset(seed=0, options={"task_id": "bundled/edit-distance"})
    assert again.error_action(np.random.default_rng(4)) == env.error_action(
        np.random.default_rng(4)
    )
    for error in picks:
        assert env.score_action(error) < 1.0


def test_error_injection_wrapper_hands_over_an_error_state(make_env: MakeEnv) -> None:
    env = ErrorInjection(make_env(max_turns=3), after_expert_steps=0)
    obs, info = env.reset(seed=1, options={"task_id": "bundled/brackets"})
    assert info["prefix_turns"] == 1 and info["turns_left"] == 3
    assert "Passed" in obs and "failed" in obs
    _, reward, terminated, _, _ = env.step(env.unwrapped.expert_action())
    assert terminated and reward == 1.0


class _BrokenSandbox(Sandbox):
    """A backend whose engine has gone away: every run reports a sandbox failure."""

    name = "broken"
    runs = 0

    def run(self, program: str, tests: Sequence[TestCase], limits: RunLimits | None = None):
        type(self).runs += 1
        return RunResult(results=(), backend=self.name, error="engine gone")


def test_sandbox_failure_is_reported_not_scored(make_env: MakeEnv) -> None:
    env = make_env(backend=f"{__name__}:_BrokenSandbox", max_turns=2)
    env.reset(seed=0, options={"task_id": STDIO})
    _BrokenSandbox.runs = 0
    obs, reward, terminated, _, info = env.step("print(1)")
    assert _BrokenSandbox.runs == 2  # retried once on a fresh sandbox
    assert info["sandbox_error"] == "engine gone" and "not scored" in obs
    assert reward == 0.0 and not terminated


class _RecordingSandbox(Sandbox):
    """Records the limits it is given; every test passes."""

    name = "recording"
    seen: ClassVar[list[RunLimits]] = []

    def run(self, program: str, tests: Sequence[TestCase], limits: RunLimits | None = None):
        assert limits is not None
        type(self).seen.append(limits)
        passed = (TestResult(True, t.expected, t.expected, "", 0, 0.0) for t in tests)
        return RunResult(results=tuple(passed), backend=self.name)


def test_submission_deadline_defaults_and_options(make_env: MakeEnv) -> None:
    backend = f"{__name__}:_RecordingSandbox"
    for kwargs, expected in (
        ({}, "auto"),
        ({"submission_timeout_s": None}, None),
        ({"submission_timeout_s": 3.5}, 3.5),
    ):
        _RecordingSandbox.seen = []
        env = make_env(backend=backend, test_timeout_s=2.0, **kwargs)
        env.reset(seed=0, options={"task_id": STDIO})
        env.step("print(1)")
        limits = _RecordingSandbox.seen[-1]
        assert _RecordingSandbox.seen == [limits] * len(_RecordingSandbox.seen)
        n = len(env.task.tests)
        assert limits.deadline_s == (2.0 * (1 + n / 4) if expected == "auto" else expected)
        assert limits.after_timeout == "stop" and limits.timeout_s == 2.0
    env = make_env(backend=backend, after_timeout="continue")
    assert env.limits.after_timeout == "continue"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"test_timeout_s": 0},
        {"test_timeout_s": float("inf")},
        {"test_timeout_s": 1e300},
        {"verify_timeout_s": -1},
        {"memory_mb": 10**12},
        {"memory_mb": 1},
        {"submission_timeout_s": 0},
        {"submission_timeout_s": "soon"},
        {"after_timeout": "retry"},
        {"sandbox_pool": "global"},
        {"cache_size": -1},
        {"max_feedback_failures": -1},
    ],
)
def test_absurd_arguments_are_refused_clearly(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DeepCoderEnv(backend="local", **kwargs)  # type: ignore[arg-type]


def test_the_old_timeout_spellings_still_work_for_one_release() -> None:
    """``timeout_s`` and ``deadline_s`` (before every timeout was ``*_timeout_s``)."""
    with pytest.deprecated_call(match="write test_timeout_s=2.0"):
        old = DeepCoderEnv(backend="local", timeout_s=2.0, deadline_s=None)
    assert old.limits.timeout_s == 2.0 and old.submission_timeout_s is None
    with pytest.raises(TypeError, match="give test_timeout_s alone"):
        DeepCoderEnv(backend="local", timeout_s=2.0, test_timeout_s=3.0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        DeepCoderEnv(backend="local", timeout=2.0)  # type: ignore[call-arg]
    old.close()


def test_a_looping_submission_is_stopped_and_the_rest_not_run(make_env: MakeEnv) -> None:
    env = make_env(max_turns=2, test_timeout_s=0.5)
    env.reset(seed=0, options={"task_id": STDIO})
    n = len(env.task.tests)
    obs, _, _, _, info = env.step("```python\nimport time\ntime.sleep(30)\n```")
    assert info["n_not_run"] == n - 1 and info["n_passed"] == 0
    assert f"{n - 1} tests were not run (test 1 exceeded its time limit (0.5 s))" in obs


@given(
    code=st.text(st.characters(blacklist_characters="`", blacklist_categories=("Cs",)), min_size=1),
    before=st.text(st.characters(blacklist_characters="`", blacklist_categories=("Cs",))),
    lang=st.sampled_from(["python", "py", "", "python3"]),
)
def test_extract_program_takes_the_last_fenced_block(code: str, before: str, lang: str) -> None:
    reply = f"{before}\n```{lang}\nfirst()\n```\nthen\n```{lang}\n{code}\n```\ntrailing words"
    assert extract_program(reply) == f"{code}\n"
    assert extract_program(code) == code  # no fence: the raw reply
    assert extract_program(f"```{lang}\n{code}") == code  # cut off mid-block


def test_extract_program_drops_think_blocks() -> None:
    assert extract_program("<think>```python\nbad()\n```</think>print(2)") == "print(2)"


@given(text=st.text(), limit=st.integers(20, 400))
def test_clip_bounds_length_and_keeps_both_ends(text: str, limit: int) -> None:
    out = clip(text, limit)
    assert len(out) <= max(limit, len("...(truncated)...") + 2)
    if len(text) <= limit:
        assert out == text
    else:
        assert out.startswith(text[:1]) and out.endswith(text[-1:])
