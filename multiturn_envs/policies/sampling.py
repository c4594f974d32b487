"""Sampling settings and per-sample seeds, the same for every backend.

:class:`Sampling` holds temperature, top-p/top-k, the reply's token cap and stop strings
(:func:`cut_at_stop` applies them to a text); :func:`sample_seed_base` turns a request's seed into
the seeds of its samples so that two requests never share one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Sampling"]

SEED_BITS = 62
"""Per-sample seeds are ``base + i`` with a 62-bit ``base``, so they fit a signed 64-bit int."""


@dataclass(frozen=True)
class Sampling:
    """Sampling settings shared by every backend.

    Attributes:
        temperature: ``0`` is greedy; otherwise logits are divided by it before sampling.
        top_p: nucleus mass kept (``1.0``: off).
        top_k: most likely tokens kept (``0``: off).
        max_tokens: the most tokens one reply may have (always set: vLLM's default is 16).
        stop: strings that end a reply; the reply's text is cut before the first one.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 is off), got {self.top_k!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        object.__setattr__(self, "stop", tuple(self.stop))
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")


def sample_seed_base(seed: int) -> int:
    """The seed of sample 0 of a request with seed ``seed``; sample ``i`` uses ``base + i``.

    vLLM gives child ``i`` of an ``n``-sample request the seed ``seed + i``, so two requests whose
    seeds differ by less than ``n`` would share samples. Hashing the request seed (unique per run,
    task, sample and turn in the harness) to a 62-bit base makes such overlaps as unlikely as a
    hash collision, while ``n`` samples of one request still come from one backend call.
    """
    if seed < 0:
        raise ValueError(f"seeds are non-negative ints, got {seed!r}")
    word = np.random.SeedSequence(int(seed)).generate_state(1, dtype=np.uint64)[0]
    return int(word) >> (64 - SEED_BITS)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut before the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
