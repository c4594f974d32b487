"""Fixtures of the LLM policy tests: the tiny model loaded (``tiny_dir`` is the root conftest's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_lm(tiny_dir: Path) -> tuple[Any, Any]:
    from multiturn_envs.testing.tiny_lm import load_tiny_chat_model

    return load_tiny_chat_model(tiny_dir)
