"""The one build step pyproject.toml cannot state: ship ``sandboxes/`` inside the wheel.

The sandbox images' definitions live at the top of the repository (``sandboxes/``, as the design
lays it out), beside the package. ``build_py`` copies them into the built package as
``multiturn_envs/sandbox/images/``, where :mod:`multiturn_envs.sandbox.recipes` finds them in an
installed wheel (``multiturn-envs sandbox build`` then needs no checkout). Everything else about
the package is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent / "sandboxes"
TARGET = Path("multiturn_envs") / "sandbox" / "images"


class BuildWithSandboxes(build_py):
    """``build_py`` plus a copy of ``sandboxes/`` (no caches) into the built package."""

    def run(self) -> None:
        super().run()
        if not SOURCE.is_dir():
            raise FileNotFoundError(f"{SOURCE}: the image definitions are missing")
        dest = Path(self.build_lib) / TARGET
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithSandboxes})
