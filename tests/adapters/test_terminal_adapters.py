"""The PettingZoo and TRL adapters on MT/Terminal-v0, as they are tested on the other envs."""

from __future__ import annotations

import pytest
from pettingzoo.test import api_test, parallel_api_test

from multiturn_envs.adapters.pettingzoo import aec_env, parallel_env
from multiturn_envs.adapters.trl import ENDED, TRLEnvironment
from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.testing import require_terminal_image

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def ready() -> None:
    require_terminal_image()


def test_pettingzoo_api_tests_pass(ready: None) -> None:
    api_test(aec_env("MT/Terminal-v0", max_turns=3), num_cycles=4)
    parallel_api_test(parallel_env("MT/Terminal-v0", max_turns=3), num_cycles=4)


def test_trl_environment_steps_the_shell_and_rewards_success(ready: None) -> None:
    env = TRLEnvironment(TerminalEnv(max_turns=4))
    obs = env.reset(task_id="count-errors", seed=0)
    assert "ERROR" in obs
    assert env.act("grep -c ERROR service.log").startswith("3\n[exit status: 0")
    last = env.act("```bash\ngrep -c ERROR service.log > error_count.txt\n```")
    assert env.done and env.success and "tests pass" in last
    assert env.act("ls") == ENDED and env.get_reward() == 1.0
    env.reset(task_id="count-errors", seed=0)
    for action in ["", "\x00\xff", {"nested": 1}, None]:
        assert isinstance(env.act(action), str)  # type: ignore[arg-type]
