"""The CI rule for tests that need a real part (Docker, a dataset package, a model)."""

from __future__ import annotations

import os

__all__ = ["require"]


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
