"""Fixtures of the LLM policy tests: a tiny offline chat model (session-scoped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llm_support import require_llm_stack


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_llm_stack()
    from multiturn_envs.testing.tiny_lm import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="session")
def tiny_lm(tiny_dir: Path) -> tuple[Any, Any]:
    from multiturn_envs.testing.tiny_lm import load_tiny_chat_model

    return load_tiny_chat_model(tiny_dir)
