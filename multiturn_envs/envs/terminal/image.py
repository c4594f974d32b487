"""Build and inspect MT/Terminal-v0's image, offline (``multiturn-envs sandbox terminal
build|status`` is the command line: :mod:`multiturn_envs.cli.sandbox`).

No image registry is reachable here, so ``docker build`` cannot pull a base. The build makes a
local base first with the sandbox's offline bootstrap (``images/bootstrap.sh`` of
:mod:`multiturn_envs.sandbox`, package data: debootstrap from the Debian mirror apt uses, then
``docker import``) with the command-line tools in ``images/terminal/packages.txt``, then builds
``images/terminal/Dockerfile`` on top of it (``FROM`` a local image needs no registry).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TERMINAL_IMAGE = "multiturn-envs-terminal:latest"
BASE_IMAGE = "multiturn-envs-terminal-base:latest"
BUILD_HINT = "multiturn-envs sandbox terminal build"


def image_exists(tag: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    return done.returncode == 0


def packages(sandboxes_dir: Path | None = None) -> list[str]:
    from multiturn_envs.sandbox.image import recipes_folder

    folder = recipes_folder() if sandboxes_dir is None else sandboxes_dir
    text = (folder / "terminal" / "packages.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def build(force: bool = False, sandboxes_dir: Path | None = None) -> str:
    """Build the base (when missing or ``force``) and the terminal image; say what was done.

    ``sandboxes_dir``: a folder of image definitions to use instead of the package's."""
    if sandboxes_dir is None:
        from multiturn_envs.sandbox.image import image_recipes

        with image_recipes() as folder:
            return build(force, folder)
    if not (sandboxes_dir / "terminal" / "Dockerfile").is_file():
        raise FileNotFoundError(f"{sandboxes_dir} holds no terminal image definition")
    did = []
    if force or not image_exists(BASE_IMAGE):
        env = dict(os.environ, MTE_IMAGE_PACKAGES=",".join(packages(sandboxes_dir)))
        script = sandboxes_dir / "bootstrap.sh"
        done = subprocess.run(["bash", str(script), BASE_IMAGE], env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{script} failed with status {done.returncode}")
        did.append(f"built {BASE_IMAGE} offline (debootstrap + docker import)")
    done2 = subprocess.run(
        ["docker", "build", "-q", "-t", TERMINAL_IMAGE, str(sandboxes_dir / "terminal")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done2.returncode != 0:
        raise RuntimeError(f"docker build of {TERMINAL_IMAGE} failed: {done2.stderr[-800:]}")
    did.append(f"built {TERMINAL_IMAGE} from {sandboxes_dir / 'terminal' / 'Dockerfile'}")
    return "; ".join(did)


def terminal_unavailable(image: str = TERMINAL_IMAGE) -> str | None:
    """Why MT/Terminal-v0 cannot run here (with the fix), or ``None``."""
    from multiturn_envs.sandbox.docker_pool import docker_unavailable

    problem = docker_unavailable(image)
    if problem is not None and image == TERMINAL_IMAGE and "missing" in problem:
        return f"the terminal image {image} is missing; build it: {BUILD_HINT}"
    return problem
