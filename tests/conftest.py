"""Shared test setup: hypothesis profiles and the toy-env fixture."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from multiturn_envs.testing import GuessEnv

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# CI explores more: five times the examples (tests that set their own max_examples keep it),
# and every run derandomised would repeat the same examples, so it stays random and prints
# the seed of a failure (hypothesis' own reproduction line).
settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")


@pytest.fixture
def guess_env() -> GuessEnv:
    env = GuessEnv()
    yield env
    env.close()
