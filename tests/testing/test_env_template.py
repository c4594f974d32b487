"""The env template runs: its tests are collected here (the template is what a new env copies;
a template that fails would teach the failure)."""

from __future__ import annotations

from multiturn_envs.testing.template.test_env import (
    TestLightsDynamics,
    test_the_env_conforms,
    test_the_expert_solves_every_task_in_the_fewest_turns,
)

__all__ = [
    "TestLightsDynamics",
    "test_the_env_conforms",
    "test_the_expert_solves_every_task_in_the_fewest_turns",
]
