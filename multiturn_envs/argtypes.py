"""Typed ``argparse`` types with a range: a flag's bounds live with the flag.

``parser.add_argument("--workers", type=IntRange(1, 1024))`` refuses ``--workers 1e8`` or
``--workers 100000000`` while parsing, with one line that names the flag and its range
(``argument --workers: an integer in [1, 1024], got '100000000'``), before anything is built
or allocated. The command line's named ranges are in :mod:`multiturn_envs.cli.common`; the
server's in :mod:`multiturn_envs.server.serve`.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class IntRange:
    """An ``argparse`` type: an integer in ``[low, high]``.

    Attributes:
        low: the smallest value allowed.
        high: the largest value allowed.
    """

    low: int
    high: int

    @property
    def __name__(self) -> str:  # argparse names the type in some messages
        return f"integer in [{self.low:,}, {self.high:,}]"

    def __call__(self, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"an integer in [{self.low:,}, {self.high:,}], got {text[:40]!r}"
            ) from None
        if not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(
                f"an integer in [{self.low:,}, {self.high:,}], got {text[:40]!r}"
            )
        return value


@dataclass(frozen=True)
class FloatRange:
    """An ``argparse`` type: a finite number in ``[low, high]``; ``low_open`` / ``high_open``
    leave out an end (a timeout must be positive: ``FloatRange(0, 3600, low_open=True)``)."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    @property
    def __name__(self) -> str:
        return self._span()

    def _span(self) -> str:
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"a number in {left}{self.low:g}, {self.high:g}{right}"

    def __call__(self, text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{self._span()}, got {text[:40]!r}") from None
        too_low = value <= self.low if self.low_open else value < self.low
        too_high = value >= self.high if self.high_open else value > self.high
        if not math.isfinite(value) or too_low or too_high:
            raise argparse.ArgumentTypeError(f"{self._span()}, got {text[:40]!r}")
        return value
