"""The tiny offline model's initialisation: Hugging Face's in kind, so a trained one can read its
prompt. Its q/k/v attention biases start at 0; at 1.0 (the init before the fix) attention is a
content-blind pattern over positions and the model cannot learn a lookup on its input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.testing import require_packages


def _tiny(folder: Path, **kwargs: Any) -> Any:
    require_packages("torch", "transformers", "tokenizers")
    import torch

    torch.set_num_threads(1)
    from multiturn_envs.rl.tiny_lm import build_tiny_chat_model, load_tiny_chat_model

    return load_tiny_chat_model(build_tiny_chat_model(folder, seed=0, **kwargs))[0]


def test_attention_biases_start_at_zero_and_norms_at_one(tmp_path: Path) -> None:
    import torch

    model = _tiny(tmp_path / "new", heads=4, kv_heads=2)
    biases = {n: p for n, p in model.named_parameters() if n.endswith(".bias")}
    assert len(biases) == 3 * 2  # q, k, v in each of the 2 layers
    assert all(torch.count_nonzero(p) == 0 for p in biases.values())
    norms = {n: p for n, p in model.named_parameters() if "norm" in n}
    assert norms and all(bool((p == 1.0).all()) for p in norms.values())
    matrices = [p for p in model.parameters() if p.dim() == 2]
    assert all(float(p.std()) > 0.0 for p in matrices)
    # the legacy init differs in the biases alone: the same seed draws the same matrices
    old = _tiny(tmp_path / "old", heads=4, kv_heads=2, qkv_bias=1.0)
    for (name, a), (_, b) in zip(model.named_parameters(), old.named_parameters()):
        if name.endswith(".bias"):
            assert bool((b == 1.0).all()), name
        else:
            assert torch.equal(a, b), name


def _lookup_accuracy(model: Any, steps: int) -> float:
    """Train on "which token follows the marker?" (the marker at a random place among random
    tokens), then score held-out sequences: a lookup on the input, like reading the cell next to
    the player on a map."""
    import torch

    length, values, marker, query = 8, 16, 98, 99
    gen = torch.Generator().manual_seed(1)

    def batch(n: int) -> tuple[Any, Any]:
        x = torch.randint(values, (n, length), generator=gen) + 10
        at = torch.randint(length - 1, (n,), generator=gen)
        rows = torch.arange(n)
        target = x[rows, at + 1].clone()
        x[rows, at] = marker
        return torch.cat([x, torch.full((n, 1), query)], 1), target

    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        ids, target = batch(32)
        loss = torch.nn.functional.cross_entropy(model(input_ids=ids).logits[:, -1], target)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    ids, target = batch(512)
    with torch.no_grad():
        guess = model(input_ids=ids).logits[:, -1].argmax(-1)
    return float((guess == target).float().mean())


@pytest.mark.parametrize(("qkv_bias", "learns"), [(0.0, True), (1.0, False)])
def test_a_tiny_model_learns_a_lookup_on_its_input_only_with_zero_biases(
    tmp_path: Path, qkv_bias: float, learns: bool
) -> None:
    accuracy = _lookup_accuracy(_tiny(tmp_path, qkv_bias=qkv_bias), steps=200)
    if learns:
        assert accuracy > 0.7  # measured 0.88 (chance: 1/16)
    else:
        assert accuracy < 0.3  # measured 0.17
