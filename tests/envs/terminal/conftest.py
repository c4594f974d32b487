"""Fixtures of the MT/Terminal-v0 tests: one env per module on the real Docker engine.

They need an engine and the terminal image; they skip without them, except under ``CI=true``
(``scripts/test.sh`` builds the image), where that is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.testing import require, require_terminal_image


@pytest.fixture(scope="session")
def terminal_ready() -> None:
    require_terminal_image()


@pytest.fixture(scope="module")
def terminal_env(terminal_ready: None) -> Iterator[TerminalEnv]:
    env = TerminalEnv(max_turns=None, end_on_success=False, warm=2)
    yield env
    env.close()


SHARED_DATA = Path(
    os.environ.get("MTE_SHARED_DATA", "")
    or Path(__file__).resolve().parents[3].parent / "shared" / "data"
)
TB1_DATA = SHARED_DATA / "terminal-bench" / "tb1"
"""Ten real Terminal-Bench 1 tasks (``../shared/data`` beside the repository root, where CI has
them; ``$MTE_SHARED_DATA`` names that folder when the checkout is elsewhere)."""


@pytest.fixture(scope="session")
def tb1_data() -> Path:
    require(
        (TB1_DATA / "hello-world" / "task.yaml").is_file(),
        f"the Terminal-Bench tasks in {TB1_DATA}",
    )
    return TB1_DATA


TB2_DATA = SHARED_DATA / "terminal-bench" / "tb2"
"""Eight real Terminal-Bench 2.0 tasks in Harbor's format (``../shared/data``, as above)."""


@pytest.fixture(scope="session")
def tb2_data() -> Path:
    require(
        (TB2_DATA / "regex-log" / "task.toml").is_file(),
        f"the Terminal-Bench 2.0 tasks in {TB2_DATA}",
    )
    return TB2_DATA
