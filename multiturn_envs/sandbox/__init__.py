"""Code-execution backends behind one small interface (:mod:`multiturn_envs.sandbox.base`).

``make_sandbox("docker" | "local" | "auto")`` builds one by name; imports stay lazy so that
importing the package never needs the docker SDK. See docs/sandbox.md.
"""

from __future__ import annotations

from typing import Any

from multiturn_envs.sandbox.base import Limits, RunResult, Sandbox, TestCase, TestResult

__all__ = ["Limits", "RunResult", "Sandbox", "TestCase", "TestResult", "make_sandbox"]


def make_sandbox(backend: str = "auto", **options: Any) -> Sandbox:
    """A backend by name: ``docker`` (the pool), ``local`` (not a security boundary), or
    ``auto`` (docker where an engine answers and the image exists, else local, loudly)."""
    if backend == "docker":
        from multiturn_envs.sandbox.docker_pool import DockerSandbox

        return DockerSandbox(**options)
    if backend == "local":
        from multiturn_envs.sandbox.local import LocalSandbox

        return LocalSandbox(**options)
    if backend == "auto":
        from multiturn_envs.sandbox.image import default_sandbox

        return default_sandbox(allow_local=True, **options)
    raise ValueError(f"backend must be 'docker', 'local' or 'auto', not {backend!r}")
