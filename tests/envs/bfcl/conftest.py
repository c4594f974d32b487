"""Fixtures of the BFCL tests: the CI rule for the real data (bfcl-eval) and env builders."""

from __future__ import annotations

import os

import pytest

from multiturn_envs.envs.bfcl.data import bfcl_eval_available


def require_bfcl_eval() -> None:
    """Skip without bfcl-eval, except under CI=true, where the real-data tests must run."""
    if bfcl_eval_available():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but bfcl-eval is not installed", pytrace=False)
    pytest.skip("bfcl-eval is not installed")


@pytest.fixture
def needs_bfcl_eval() -> None:
    require_bfcl_eval()
