"""Fixtures of the DeepCoder-MT tests: the local backend everywhere, docker where it runs.

Docker tests skip without an engine and the sandbox image, except under ``CI=true``, where they
fail (``.ci/run`` starts the engine and builds the image).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from multiturn_envs.envs.deepcoder.env import DeepCoderEnv
from multiturn_envs.testing import require_docker


@pytest.fixture
def make_env() -> Iterator[Callable[..., DeepCoderEnv]]:
    """Builds local-backend envs and closes them all afterwards."""
    made: list[DeepCoderEnv] = []

    def make(**kwargs: object) -> DeepCoderEnv:
        kwargs.setdefault("backend", "local")
        env = DeepCoderEnv(**kwargs)  # type: ignore[arg-type]
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


@pytest.fixture(scope="module")
def local_env() -> Iterator[DeepCoderEnv]:
    """One bundled-data env on the local backend, shared by a module's tests."""
    env = DeepCoderEnv(max_turns=4, backend="local")
    yield env
    env.close()


@pytest.fixture(scope="module")
def docker_backend() -> str:
    require_docker()
    return "docker"
