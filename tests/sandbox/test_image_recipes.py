"""The image definitions are package data (a wheel builds the images without a checkout):
``sandbox/images`` holds them, :func:`image_recipes` gives docker a real folder, the terminal
image reads its package list from there, and ``multiturn-envs sandbox path`` prints it.
(scripts/check_wheel.sh builds the wheel and runs an episode of each image from it.)"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest
import tomllib

from multiturn_envs.cli import main
from multiturn_envs.envs.terminal.image import packages
from multiturn_envs.sandbox.image import image_recipes, recipes_folder

ROOT = Path(__file__).resolve().parents[2]
FILES = (
    "Dockerfile",
    "bootstrap.sh",
    "finalize.sh",
    "terminal/Dockerfile",
    "terminal/packages.txt",
    "terminal/packages-extra.txt",
    "terminal/offline/lib.sh",
    "terminal/offline/mte_ctrf.py",
    "terminal/offline/provides.txt",
    "terminal/offline/pytest_json_ctrf-0.0.0+mte.dist-info/METADATA",
    "terminal/offline/pytest_json_ctrf-0.0.0+mte.dist-info/RECORD",
    "terminal/offline/pytest_json_ctrf-0.0.0+mte.dist-info/entry_points.txt",
    *(f"terminal/offline/bin/{n}" for n in ("apt", "apt-get", "curl", "pip", "pip3", "pytest")),
    *(f"terminal/offline/bin/{n}" for n in ("uv", "uvx")),
)


def test_the_definitions_are_in_the_package_and_listed_as_package_data() -> None:
    folder = recipes_folder()
    for name in FILES:
        assert (folder / name).is_file(), name
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["multiturn_envs.sandbox"]
    shipped = sorted(
        str(p.relative_to(ROOT / "multiturn_envs" / "sandbox"))
        for p in (ROOT / "multiturn_envs" / "sandbox" / "images").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert shipped == sorted(f"images/{n}" for n in FILES)
    for path in shipped:  # every file of the folder goes into the wheel
        assert any(fnmatch(path, pattern) for pattern in patterns), path
    assert not (ROOT / "sandboxes").exists()  # one home: no second copy beside the package


def test_image_recipes_is_a_real_folder_and_the_terminal_packages_come_from_it() -> None:
    with image_recipes() as folder:
        assert (folder / "bootstrap.sh").read_text().startswith("#!/usr/bin/env bash")
        listed = (folder / "terminal" / "packages.txt").read_text().split()
    assert packages() == listed and "git" in listed


def test_sandbox_path_prints_the_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == Path(str(recipes_folder()))
