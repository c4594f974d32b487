"""Where the image definitions are: ``sandboxes/`` at the top of a checkout, inside a wheel.

The design puts the sandbox images' definitions (the Dockerfiles, the offline bootstrap, the
terminal image's package lists and offline stand-ins) at the top level, in ``sandboxes/``, beside
the package rather than in it. A wheel still ships them: the build copies ``sandboxes/`` into the
wheel as ``multiturn_envs/sandbox/images/`` (``setup.py``'s ``build_py`` step), so
``multiturn-envs sandbox build`` works from an installed wheel and from a checkout alike.
:func:`recipes_folder` looks in that order: a checkout's ``sandboxes/`` (the package's parent
holds one, with its ``bootstrap.sh``), else the copy the wheel installed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Traversable

__all__ = ["CHECKOUT_FOLDER", "WHEEL_FOLDER", "image_recipes", "recipes_folder"]

CHECKOUT_FOLDER = "sandboxes"
"""The image definitions' folder at the top of a checkout."""
WHEEL_FOLDER = "images"
"""Their copy inside an installed wheel (beside this module)."""


def _checkout() -> Path | None:
    here = Path(__file__).resolve()
    folder = here.parents[2] / CHECKOUT_FOLDER  # <checkout>/multiturn_envs/sandbox/recipes.py
    return folder if (folder / "bootstrap.sh").is_file() else None


def recipes_folder() -> Traversable:
    """The image definitions: a checkout's ``sandboxes/``, else the wheel's copy."""
    checkout = _checkout()
    if checkout is not None:
        return checkout
    return resources.files("multiturn_envs.sandbox") / WHEEL_FOLDER


@contextmanager
def image_recipes() -> Iterator[Path]:
    """The image definitions as a real folder, which ``docker build`` and ``bash`` need: the
    folder itself when it is one (a checkout, a wheel installed as files), else a temporary
    copy (a zipped install) removed on exit."""
    root = recipes_folder()
    if isinstance(root, Path):
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="mte-images-") as tmp:
        _copy_tree(root, Path(tmp))
        yield Path(tmp)


def _copy_tree(source: Traversable, dest: Path) -> None:
    for item in source.iterdir():
        if item.is_dir():
            (dest / item.name).mkdir()
            _copy_tree(item, dest / item.name)
        else:
            with item.open("rb") as src, open(dest / item.name, "wb") as out:
                shutil.copyfileobj(src, out)
