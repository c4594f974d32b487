"""Build the sandbox image and pick the default backend (the command line,
``multiturn-envs sandbox build|status|reap``, is :mod:`multiturn_envs.cli.sandbox`).

The image definitions are ``sandboxes/`` at the top of a checkout, shipped in the wheel too
(:mod:`.recipes`), so an installed wheel builds the images without a checkout. ``build`` tries
``sandboxes/Dockerfile`` (needs a pullable base image) and falls back to the offline bootstrap
``sandboxes/bootstrap.sh`` (debootstrap of a minimal Debian with python3, then ``docker
import``; needs root, debootstrap and a Debian package mirror), and prints what it did.
:func:`default_sandbox` returns the docker pool when an engine answers and the image
exists, else raises with the command that fixes it (or, with ``allow_local=True``, falls back
to the local backend, loudly).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from multiturn_envs.sandbox.base import Sandbox
from multiturn_envs.sandbox.engine import IMAGE, docker_unavailable
from multiturn_envs.sandbox.recipes import image_recipes


def build(tag: str = IMAGE, offline: bool = False, sandboxes_dir: Path | None = None) -> str:
    """Build the image; returns a one-line account of how it was built.

    ``sandboxes_dir``: a folder of image definitions to use instead of the package's."""
    if sandboxes_dir is None:
        with image_recipes() as folder:
            return build(tag, offline, folder)
    if not (sandboxes_dir / "bootstrap.sh").is_file():
        raise FileNotFoundError(f"{sandboxes_dir} holds no image definitions (bootstrap.sh)")
    if not offline:
        print(f"image: trying docker build of {sandboxes_dir / 'Dockerfile'}", flush=True)
        done = subprocess.run(
            ["docker", "build", "-q", "-t", tag, str(sandboxes_dir)],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return f"built {tag} from the Dockerfile"
        reason = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
        print(f"image: docker build failed ({reason}); using the offline bootstrap", flush=True)
    script = sandboxes_dir / "bootstrap.sh"
    status = subprocess.run(["bash", str(script), tag]).returncode
    if status != 0:
        raise RuntimeError(f"{script} failed with status {status}")
    return f"built {tag} offline with {script.name} (debootstrap + docker import)"


def default_sandbox(allow_local: bool = False, shared: bool = False, **options: Any) -> Sandbox:
    """The docker pool where it can run (the process's shared one with ``shared=True``); else
    the local backend if allowed, else an error."""
    problem = docker_unavailable(str(options.get("image", IMAGE)))
    if problem is None:
        from multiturn_envs.sandbox.docker_pool import DockerSandbox

        return DockerSandbox.shared(**options) if shared else DockerSandbox(**options)
    if allow_local:
        from multiturn_envs.sandbox.local import LocalSandbox

        print(f"sandbox: docker backend unavailable: {problem}", file=sys.stderr)
        return LocalSandbox()
    raise RuntimeError(f"the docker sandbox is unavailable: {problem}")
