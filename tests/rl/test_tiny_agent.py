"""The tiny tool model is a pure function of its inputs and seed.

A test that trains it (the TRL GRPO step) is only as reproducible as its weights: the embedding
rows that the re-fitted tokenizer adds once came from torch's global RNG, so about one run in
twelve warm-started into a model that never called the tool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiturn_envs.adapters.trl import TOOL_HINT, TRLEnvironment
from multiturn_envs.rl.tool_format import random_tool_chats
from multiturn_envs.testing import GuessEnv, require_packages


def _build(directory: Path, seed: int) -> dict[str, Any]:
    require_packages("torch", "transformers", "tokenizers", "safetensors")
    import torch
    from safetensors.torch import load_file

    from multiturn_envs.rl.tiny_agent import build_tiny_tool_model

    tasks = [f"secret-{i}" for i in range(6)]
    chats = random_tool_chats(GuessEnv(max_turns=3), tasks, episodes=6, system=TOOL_HINT)
    torch.manual_seed(1000 + len(list(directory.parent.iterdir())))  # a different global state
    out = build_tiny_tool_model(
        directory,
        chats,
        tools=[TRLEnvironment(GuessEnv()).act],
        system=TOOL_HINT,
        vocab_size=512,
        seed=seed,
    )
    return load_file(str(out / "model.safetensors"))


def test_same_seed_same_weights_whatever_the_global_rng(tmp_path: Path) -> None:
    import torch

    weights = _build(tmp_path / "a", seed=3)
    twin = _build(tmp_path / "b", seed=3)
    other = _build(tmp_path / "c", seed=4)
    assert weights.keys() == twin.keys()
    for name, tensor in weights.items():
        assert torch.equal(tensor, twin[name]), name
    assert not torch.equal(weights["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


def test_random_tool_chats_are_whole_episodes_in_the_tool_layout() -> None:
    chats = random_tool_chats(
        GuessEnv(max_turns=3), ["secret-1", "secret-2"], episodes=4, system="S"
    )
    assert len(chats) == 4
    for chat in chats:
        roles = [m["role"] for m in chat]
        assert roles[:2] == ["system", "user"] and chat[0]["content"] == "S"
        assert roles[2:] == ["assistant", "tool"] * ((len(roles) - 2) // 2)
        assert 1 <= (len(roles) - 2) // 2 <= 3  # at most the budget of actions
        for message in chat[2::2]:
            action = message["tool_calls"][0]["function"]["arguments"]["action"]
            assert action.startswith("guess ")
    assert chats == random_tool_chats(
        GuessEnv(max_turns=3), ["secret-1", "secret-2"], episodes=4, system="S"
    )
