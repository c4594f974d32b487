"""Fixtures of the sandbox tests: one local backend, one docker pool per module.

Docker tests need an engine and the sandbox image; they skip without them, except under
``CI=true``, where a missing engine or image fails them (``.ci/run`` starts both).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from multiturn_envs.sandbox.base import Sandbox
from multiturn_envs.sandbox.local import LocalSandbox
from multiturn_envs.testing import require_docker


@pytest.fixture(scope="module")
def local_sandbox() -> Iterator[LocalSandbox]:
    sandbox = LocalSandbox(quiet=True)
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Skips (fails under CI=true) unless an engine answers and the image exists."""
    require_docker()


@pytest.fixture(scope="module")
def docker_sandbox(docker_ready: None) -> Iterator[Sandbox]:
    from multiturn_envs.sandbox.docker_pool import DockerSandbox

    sandbox = DockerSandbox(size=2)
    yield sandbox
    sandbox.close()


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    """Each backend in turn: the behaviour every backend must share."""
    return request.getfixturevalue(f"{request.param}_sandbox")
