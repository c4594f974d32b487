"""Build and inspect MT/Terminal-v0's image, offline (``multiturn-envs sandbox terminal
build|status`` is the command line: :mod:`multiturn_envs.cli.sandbox`).

No image registry is reachable here, so ``docker build`` cannot pull a base. The build makes a
local base first with the sandbox's offline bootstrap (``images/bootstrap.sh`` of
:mod:`multiturn_envs.sandbox`, package data: debootstrap from the Debian mirror apt uses, then
``docker import``) with the command-line tools in ``sandboxes/terminal/packages.txt``, then builds
``sandboxes/terminal/Dockerfile`` on top of it (``FROM`` a local image needs no registry).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

TERMINAL_IMAGE = "multiturn-envs-terminal:latest"
BASE_IMAGE = "multiturn-envs-terminal-base:latest"
IMAGE_VARIABLE = "MTE_TERMINAL_IMAGE"
"""Environment variable naming another terminal image to use by default (a variant built with
``multiturn-envs sandbox terminal build --tag``)."""
BUILD_HINT = "multiturn-envs sandbox terminal build"


def image_exists(tag: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    return done.returncode == 0


VERSION_LABEL = "org.multiturn-envs.terminal-version"
"""The image label holding :func:`recipe_version` of the recipe it was built from."""


def recipe_version(
    sandboxes_dir: Path | None = None, base_only: bool = False, extras: bool = False
) -> str | None:
    """A digest of the image's recipe (``sandboxes/terminal/`` and the bootstrap scripts of the
    package's image definitions, or of ``sandboxes_dir``; with ``base_only`` the base's part:
    the package lists and the bootstrap scripts; ``extras``: the variant with
    ``packages-extra.txt``), or ``None`` when the definitions are incomplete."""
    if sandboxes_dir is None:
        from multiturn_envs.sandbox.recipes import image_recipes

        with image_recipes() as folder:
            return recipe_version(folder, base_only, extras)

    terminal = sandboxes_dir / "terminal"
    scripts = [sandboxes_dir / "bootstrap.sh", sandboxes_dir / "finalize.sh"]
    if not terminal.is_dir() or not all(p.is_file() for p in scripts):
        return None
    recipe = [terminal / "packages.txt"] if base_only else sorted(terminal.rglob("*"))
    # not the extras list (its own variant), nor the bytecode an install compiles beside
    # offline/mte_ctrf.py (a wheel's copy must give the checkout's digest)
    recipe = [p for p in recipe if p.name != EXTRA_PACKAGES and "__pycache__" not in p.parts]
    if extras:
        recipe.append(terminal / EXTRA_PACKAGES)
    digest = hashlib.sha256(b"extras\0" if extras else b"")
    for path in [*recipe, *scripts]:
        if path.is_file():
            digest.update(str(path.relative_to(sandboxes_dir)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def image_label(tag: str) -> str:
    done = subprocess.run(
        [
            "docker",
            "image",
            "inspect",
            "-f",
            f'{{{{index .Config.Labels "{VERSION_LABEL}"}}}}',
            tag,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else ""


EXTRA_PACKAGES = "packages-extra.txt"
"""Packages of the ``--extras`` variant (compilers, numpy, pandas): many Terminal-Bench tasks
need them, the bundled ones and CI do not (they add ~270 MB and about a minute to the build)."""


def packages(sandboxes_dir: Path | None = None, extras: bool = False) -> list[str]:
    from multiturn_envs.sandbox.recipes import recipes_folder

    folder = recipes_folder() if sandboxes_dir is None else sandboxes_dir
    names = ["packages.txt", EXTRA_PACKAGES] if extras else ["packages.txt"]
    out: list[str] = []
    for name in names:
        text = (folder / "terminal" / name).read_text(encoding="utf-8")
        out += [line.strip() for line in text.splitlines() if line.strip()]
    return out


def terminal_image() -> str:
    """The terminal image used by default: ``$MTE_TERMINAL_IMAGE``, else :data:`TERMINAL_IMAGE`."""
    return os.environ.get(IMAGE_VARIABLE, "").strip() or TERMINAL_IMAGE


EXTRAS_IMAGE = "multiturn-envs-terminal:extras"
"""The tag ``build --extras`` gives when none is named: the default image stays lean."""


def build_tag(tag: str | None, extras: bool) -> str:
    """The tag ``build`` gives: ``tag``, else :func:`terminal_image` (with ``extras``,
    :data:`EXTRAS_IMAGE` when that is the default image); the extras under the default
    image's tag are refused (``RuntimeError``: the default image stays lean)."""
    if tag is None:
        tag = terminal_image()
        if extras and tag == TERMINAL_IMAGE:
            tag = EXTRAS_IMAGE
    if extras and tag == TERMINAL_IMAGE:
        raise RuntimeError(
            f"{TERMINAL_IMAGE} is the lean default image and is never built with the extras: "
            f"give the variant another tag ({EXTRAS_IMAGE}, say) and make it the default "
            f"with ${IMAGE_VARIABLE}"
        )
    return tag


def base_tag(tag: str) -> str:
    """The local base a terminal image ``tag`` is built on: :data:`BASE_IMAGE` for the default
    image, else a base of its own named after the whole tag (``name:v`` and ``name`` get
    different ones from the default's), so building a variant never replaces the base the
    default image and other processes use."""
    if tag == TERMINAL_IMAGE:
        return BASE_IMAGE
    last = tag.rsplit("/", 1)[-1]
    name, version = tag.rsplit(":", 1) if ":" in last else (tag, "latest")
    slug = re.sub(r"[^a-z0-9_.-]+", "-", f"{name}-{version}".lower()).strip("-._") or "variant"
    digest = hashlib.sha256(tag.encode()).hexdigest()[:8]  # two tags, one slug: two bases
    return f"{BASE_IMAGE.split(':')[0]}:{slug[:100]}-{digest}"


def build(
    force: bool = False,
    sandboxes_dir: Path | None = None,
    tag: str | None = None,
    extras: bool = False,
) -> str:
    """Build the base (when missing, from another recipe, or ``force``) and the terminal image;
    say what was done.

    ``tag``: the terminal image's tag (default :func:`terminal_image`; with ``extras``,
    :data:`EXTRAS_IMAGE` when that is the default image). Every tag but
    :data:`TERMINAL_IMAGE` gets a base of its own (:func:`base_tag`), so a variant never
    replaces the images other processes use; the default image is never built with the
    extras (refused: it stays lean). ``extras``: also the packages of ``packages-extra.txt``.
    ``sandboxes_dir``: a folder of image definitions to use instead of the package's."""
    if sandboxes_dir is None:
        from multiturn_envs.sandbox.recipes import image_recipes

        with image_recipes() as folder:
            return build(force, folder, tag, extras)
    if not (sandboxes_dir / "terminal" / "Dockerfile").is_file():
        raise FileNotFoundError(f"{sandboxes_dir} holds no terminal image definition")
    tag = build_tag(tag, extras)
    base = base_tag(tag)
    did = []
    base_version = recipe_version(sandboxes_dir, base_only=True, extras=extras) or "unknown"
    if force or not image_exists(base) or image_label(base) != base_version:
        env = dict(
            os.environ,
            MTE_IMAGE_PACKAGES=",".join(packages(sandboxes_dir, extras)),
            MTE_IMAGE_LABEL=f"{VERSION_LABEL}={base_version}",
        )
        script = sandboxes_dir / "bootstrap.sh"
        done = subprocess.run(["bash", str(script), base], env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{script} failed with status {done.returncode}")
        did.append(f"built {base} offline (debootstrap + docker import)")
    done2 = subprocess.run(
        [
            "docker",
            "build",
            "-q",
            "--force-rm",
            "--build-arg",
            f"BASE={base}",
            "--build-arg",
            f"VERSION={recipe_version(sandboxes_dir, extras=extras) or 'unknown'}",
            "-t",
            tag,
            str(sandboxes_dir / "terminal"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done2.returncode != 0:
        raise RuntimeError(f"docker build of {tag} failed: {done2.stderr[-800:]}")
    did.append(f"built {tag} from {sandboxes_dir / 'terminal' / 'Dockerfile'}")
    return "; ".join(did)


def terminal_unavailable(image: str | None = None) -> str | None:
    """Why MT/Terminal-v0 cannot run here (with the fix), or ``None``."""
    from multiturn_envs.sandbox.engine import docker_unavailable

    image = image or terminal_image()
    problem = docker_unavailable(image)
    if problem is not None and "missing" in problem:
        return f"the terminal image {image} is missing; build it: {BUILD_HINT}"
    if problem is None:
        wanted = {recipe_version(), recipe_version(extras=True)}
        if None not in wanted and image_label(image) not in wanted:
            return (
                f"the terminal image {image} was built from another recipe than this "
                f"recipe in sandboxes/terminal; rebuild it: {BUILD_HINT}"
            )
    return problem
