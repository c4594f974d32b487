"""InterCode's published data (``../shared/data/intercode`` beside the repository root)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from multiturn_envs.testing import require

INTERCODE_DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "intercode"


@pytest.fixture(scope="session")
def intercode_data() -> Path:
    """The directory with ``ic_spider_dev.json`` and the five published runs (CI has it).

    The Spider databases come from the ``intercode-bench`` package, required as well.
    """
    require(importlib.util.find_spec("intercode") is not None, "the intercode-bench package")
    require(
        (INTERCODE_DATA / "ic_spider_dev.json").is_file(), f"InterCode's data in {INTERCODE_DATA}"
    )
    return INTERCODE_DATA
