"""Fixtures of the MT/Terminal-v0 tests: one env per module on the real Docker engine.

They need an engine and the terminal image; they skip without them, except under ``CI=true``
(``scripts/test.sh`` builds the image), where that is a failure.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.testing import require


def terminal_problem() -> str | None:
    """Why MT/Terminal-v0 cannot run here, or ``None``."""
    try:
        from multiturn_envs.envs.terminal.image import terminal_unavailable
    except ImportError as exc:  # the docker SDK is not installed
        return f"the docker SDK ({exc})"
    return terminal_unavailable()


@pytest.fixture(scope="session")
def terminal_ready() -> None:
    problem = terminal_problem()
    require(problem is None, f"a docker engine with the terminal image ({problem})")


@pytest.fixture(scope="module")
def terminal_env(terminal_ready: None) -> Iterator[TerminalEnv]:
    env = TerminalEnv(max_turns=None, end_on_success=False, warm=2)
    yield env
    env.close()
