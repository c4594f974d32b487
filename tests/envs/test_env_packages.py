"""Every env package's ``__init__`` has the one style (issue 33): lazy names, the env id first.

The style is :mod:`multiturn_envs.envs.lazy`'s; the env template shows it. Checked in a fresh
interpreter, so that what importing a package imports is seen, not what the suite imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import multiturn_envs
from multiturn_envs.registration import ENV_ENTRY_POINTS

ENVS = Path(multiturn_envs.__file__).parent / "envs"
PACKAGES = sorted(p.parent.name for p in ENVS.glob("*/__init__.py"))
STATEMENTS = ["ImportFrom"] * 3 + ["If", "AnnAssign", "Expr", "Assign", "Assign"]
"""The statements of the style, in order: the future import, TYPE_CHECKING, lazy_exports, the
TYPE_CHECKING block, HOMES and its docstring, ``__all__``, and ``__getattr__, __dir__``."""


@pytest.mark.parametrize("package", PACKAGES)
def test_an_env_package_names_its_env_and_imports_nothing_until_asked(package: str) -> None:
    path = ENVS / package / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    ids = [env_id for env_id, entry in ENV_ENTRY_POINTS if f".envs.{package}." in entry]
    assert len(ids) == 1 and doc.startswith(f"{ids[0]}: "), f"{path}: start with '{ids[0]}: '"
    assert [type(s).__name__ for s in tree.body[1:]] == STATEMENTS, f"{path}: not the style"
    probe = (
        f"import sys, multiturn_envs.envs.{package} as p\n"
        f"before = {{m for m in sys.modules if m.startswith('multiturn_envs.envs.{package}.')}}\n"
        "names = [getattr(p, n) for n in p.__all__]\n"
        "assert sorted(p.__all__) == sorted(p.HOMES) and set(p.__all__) <= set(dir(p))\n"
        "print(sorted(before))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"importing {package} imported {done.stdout}"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import multiturn_envs.envs.frozenlake as frozenlake

    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        frozenlake.Nope  # noqa: B018
