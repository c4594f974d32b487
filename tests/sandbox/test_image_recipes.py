"""The image definitions are ``sandboxes/`` at the top of the checkout, as the design lays it out,
and the wheel ships them (``setup.py``'s build step copies them into
``multiturn_envs/sandbox/images/``): :func:`recipes_folder` finds them either way,
:func:`image_recipes` gives docker a real folder, the terminal image reads its package list from
there, and ``multiturn-envs sandbox path`` prints it. (scripts/check_wheel.sh builds the wheel
and runs ``sandbox build`` and an episode of each image from it.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from multiturn_envs.cli import main
from multiturn_envs.sandbox.recipes import image_recipes, recipes_folder
from multiturn_envs.sandbox.terminal_image import packages

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


def test_the_definitions_are_at_the_top_and_only_there() -> None:
    folder = recipes_folder()
    assert Path(str(folder)) == ROOT / "sandboxes"  # a checkout reads its own
    for name in FILES:
        assert (folder / name).is_file(), name
    listed = sorted(
        str(p.relative_to(ROOT / "sandboxes"))
        for p in (ROOT / "sandboxes").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert listed == sorted(FILES)
    assert not (ROOT / "multiturn_envs" / "sandbox" / "images").exists()  # one home


def test_the_build_step_puts_them_into_the_wheel(tmp_path: Path) -> None:
    """``setup.py``'s ``build_py`` copies ``sandboxes/`` into the built package, where an
    installed wheel's :func:`recipes_folder` looks (the wheel itself: scripts/check_wheel.sh)."""
    import subprocess
    import sys

    build = tmp_path / "build"
    done = subprocess.run(
        [
            *(sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)),
            *("build_py", "--build-lib", str(build)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shipped = sorted(
        str(p.relative_to(build / "multiturn_envs" / "sandbox" / "images"))
        for p in (build / "multiturn_envs" / "sandbox" / "images").rglob("*")
        if p.is_file()
    )
    assert shipped == sorted(FILES)
    assert (build / "multiturn_envs" / "sandbox" / "check_runner.py").is_file()


def test_image_recipes_is_a_real_folder_and_the_terminal_packages_come_from_it() -> None:
    with image_recipes() as folder:
        assert (folder / "bootstrap.sh").read_text().startswith("#!/usr/bin/env bash")
        listed = (folder / "terminal" / "packages.txt").read_text().split()
    assert packages() == listed and "git" in listed


def test_sandbox_path_prints_the_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == Path(str(recipes_folder()))
