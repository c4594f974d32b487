"""Fixtures of the BFCL tests: the CI rule for the real data (bfcl-eval) and env builders."""

from __future__ import annotations

import pytest

from multiturn_envs.envs.bfcl.data import bfcl_eval_available
from multiturn_envs.testing import require


def require_bfcl_eval() -> None:
    """Skip without bfcl-eval, except under CI=true, where the real-data tests must run."""
    require(bfcl_eval_available(), "the bfcl-eval package")


@pytest.fixture
def needs_bfcl_eval() -> None:
    require_bfcl_eval()
