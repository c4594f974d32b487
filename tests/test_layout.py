"""Repository rules that keep the suite collectable."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_test_module_names_are_unique() -> None:
    # tests/ has no __init__.py files (pytest's rootdir import mode), so two test modules with
    # one basename in different folders make collection fail with "import file mismatch".
    root = Path(__file__).parent
    names = Counter(p.name for p in root.rglob("*.py") if p.name != "conftest.py")
    assert [n for n, c in names.items() if c > 1] == []
