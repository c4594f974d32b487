"""A progress line for long runs: tqdm when installed, else one rewritten stderr line."""

from __future__ import annotations

import sys
import time
from typing import Any

from multiturn_envs.deprecation import renamed_attribute

__all__ = ["ProgressLine"]


class ProgressLine:
    """tqdm when installed, else one rewritten stderr line; silent when off."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.enabled = enabled
        self.total, self.n = total, initial
        self._bar: Any = None
        self._last = 0.0
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, initial=initial, unit="traj", file=sys.stderr)

    def update(self, k: int) -> None:
        self.n += k
        if not self.enabled or k == 0:
            return
        if self._bar is not None:
            self._bar.update(k)
            return
        now = time.monotonic()
        if now - self._last >= 0.2 or self.n >= self.total:
            self._last = now
            sys.stderr.write(f"\r{self.n}/{self.total} trajectories")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


def __getattr__(name: str) -> Any:
    """Old names, read for one release (:mod:`multiturn_envs.deprecation`): ``Progress`` is
    ``ProgressLine`` (issue 33: two classes named ``Progress`` meant two things)."""
    return renamed_attribute(__name__, name, {"Progress": ProgressLine})
