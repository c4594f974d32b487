"""Code-execution backends behind one small interface (:mod:`multiturn_envs.sandbox.base`).

``make_sandbox("docker" | "local" | "auto")`` builds one by name (``shared=True``: the process's
one docker pool, :meth:`DockerSandbox.shared`); imports stay lazy so that importing the package
never needs the docker SDK. See docs/sandbox.md.
"""

from __future__ import annotations

from typing import Any

from multiturn_envs.deprecation import renamed_attribute
from multiturn_envs.sandbox.base import (
    RunLimits,
    RunResult,
    Sandbox,
    TestCase,
    TestResult,
    default_deadline,
)

__all__ = [
    "RunLimits",
    "RunResult",
    "Sandbox",
    "TestCase",
    "TestResult",
    "default_deadline",
    "make_sandbox",
]


def make_sandbox(backend: str = "auto", shared: bool = False, **options: Any) -> Sandbox:
    """A backend by name: ``docker`` (the pool), ``local`` (not a security boundary), or
    ``auto`` (docker where an engine answers and the image exists, else local, loudly).

    ``shared=True``: the docker backend is the process's shared pool
    (:meth:`~multiturn_envs.sandbox.docker_pool.DockerSandbox.shared`), whose ``close`` does
    nothing; otherwise a pool of the caller's own. The local backend has no pool to share.
    """
    if backend == "docker":
        from multiturn_envs.sandbox.docker_pool import DockerSandbox

        return DockerSandbox.shared(**options) if shared else DockerSandbox(**options)
    if backend == "local":
        from multiturn_envs.sandbox.local import LocalSandbox

        return LocalSandbox(**options)
    if backend == "auto":
        from multiturn_envs.sandbox.image import default_sandbox

        return default_sandbox(allow_local=True, shared=shared, **options)
    raise ValueError(f"backend must be 'docker', 'local' or 'auto', not {backend!r}")


def __getattr__(name: str) -> Any:
    """Old names, read for one release (:mod:`multiturn_envs.deprecation`): ``Limits`` is
    ``RunLimits`` (issue 33: three classes named ``Limits`` meant three things)."""
    return renamed_attribute(__name__, name, {"Limits": RunLimits})
