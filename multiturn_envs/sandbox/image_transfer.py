"""Images reaching an engine without the internet, and whether the copy there is current.

No public registry is reachable from a cluster like ours, and a remote engine has no checkout to
build from. An engine gets an image from **this machine's engine**, where ``multiturn-envs
sandbox build`` (or a task's preparation) made it:

* ``docker save`` here streamed into ``docker load`` there (the default; nothing to run, the
  image crosses the link once, in chunks, never whole in memory);
* or through **a registry on the local network** (Debian's ``docker-registry``), named by the
  engine's ``registry=HOST:PORT`` option: pushed here, pulled there, then tagged with the
  image's own name (worth it when many engines need the same image: each layer crosses the
  link from the registry, and a layer the engine has is not sent again).

**Currency** is decided by the image's recipe digest, not by its age or id: an image built from
this package's recipe carries it as a label (``org.multiturn-envs.*``, e.g. the terminal
image's ``terminal-version``). The copy on an engine is current when its project labels equal
those of this machine's image, or, when this machine has no engine (a GPU node), those the
package's recipes give (:func:`expected_labels`); an image without such labels (a task's image,
named by a content digest, or the code sandbox's) is current when its id equals this machine's
(``save``/``load`` keeps ids). An image present on the engine that cannot be judged (no label,
no engine here to compare with) is used as it is. The decision is made once per engine, image
and process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiturn_envs.sandbox.docker_engine import DockerEngine

__all__ = [
    "LABEL_PREFIX",
    "PUSH_VARIABLE",
    "ImageMissing",
    "build_hint",
    "expected_labels",
    "make_current",
    "project_labels",
]

LABEL_PREFIX = "org.multiturn-envs."
PUSH_VARIABLE = "MTE_REGISTRY_PUSH"
"""Where this machine pushes for a registry transfer when it reaches the registry at another
address than the engines do (e.g. ``127.0.0.1:5000``, which the Docker engine lets go without
TLS, while engines pull from ``HOST:5000``); unset: the engine's ``registry=`` address."""
CHUNK = 2 << 20


def project_labels(attrs: dict[str, Any] | None) -> dict[str, str]:
    """The image's ``org.multiturn-envs.*`` labels (its recipe digests)."""
    if not attrs:
        return {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items() if str(k).startswith(LABEL_PREFIX)}


def expected_labels(image: str) -> list[dict[str, str]]:
    """The label sets this package's recipes give ``image`` (any one is current); ``[]`` when
    the package has no recipe for it."""
    from multiturn_envs.sandbox.terminal_image import VERSION_LABEL, recipe_version, terminal_image

    if image.split(":")[0] == terminal_image().split(":")[0] or image.startswith(
        "multiturn-envs-terminal:"
    ):
        out = []
        for extras in (False, True):
            version = recipe_version(extras=extras)
            if version is not None:
                out.append({VERSION_LABEL: version})
        return out
    return []


class ImageMissing(RuntimeError):
    """This machine's engine has no such image (the message names the command that builds it)."""


def build_hint(image: str) -> str:
    """The command that makes ``image`` on this machine."""
    from multiturn_envs.sandbox.engine import BUILD_HINT, IMAGE
    from multiturn_envs.sandbox.terminal_image import BUILD_HINT as TERMINAL_HINT

    if image == IMAGE or image.startswith("multiturn-envs-sandbox"):
        return BUILD_HINT
    if image.startswith("multiturn-envs-terminal"):
        return TERMINAL_HINT
    return "prepare the task on this machine first (its image is built here)"


def _inspect(engine: DockerEngine, image: str) -> dict[str, Any] | None:
    import docker

    try:
        with engine.calls():
            return dict(engine.api.inspect_image(image))
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.NotFound:
        return None


def _current(target: dict[str, Any], source: dict[str, Any] | None, image: str) -> bool | None:
    """Whether ``target`` (the engine's copy) is current; ``None``: cannot be judged."""
    mine = project_labels(target)
    if source is not None:
        theirs = project_labels(source)
        if theirs:
            return mine == theirs
        return bool(target.get("Id")) and target.get("Id") == source.get("Id")
    expected = expected_labels(image)
    if expected:
        return any(mine == labels for labels in expected)
    return None


def _answering(local: DockerEngine | None, engine: DockerEngine) -> DockerEngine | None:
    """This machine's engine, when it answers and is not ``engine`` itself."""
    if local is None or engine.address.scheme == "local" or local.address == engine.address:
        return None
    try:
        local.client  # noqa: B018 - connects, or raises when no engine answers here
    except RuntimeError:
        return None
    return local


def make_current(engine: DockerEngine, image: str, local: DockerEngine | None) -> str:
    """Make ``image`` present and current on ``engine`` (module docstring), sent from
    ``local`` (this machine's engine) when it is not; the id it is current with there.
    :class:`ImageMissing` when this machine's engine lacks it, else ``RuntimeError`` saying
    what is missing where and the command that makes it. The engine keeps the answer
    (:meth:`~.docker_engine.DockerEngine.ensure_image`)."""
    target = _inspect(engine, image)
    local = _answering(local, engine)
    if local is None and engine.address.scheme == "local":
        if target is None:
            raise ImageMissing(f"the image {image} is missing; build it: {build_hint(image)}")
        return str(target.get("Id", ""))
    source = _inspect(local, image) if local is not None else None
    if target is not None and _current(target, source, image) is not False:
        return str(target.get("Id", ""))
    if source is None or local is None:
        why = "is missing" if target is None else "was built from another recipe"
        raise RuntimeError(
            f"the image {image} {why} on the engine {engine.name}, and this machine has no "
            f"engine holding it to send; build it here ({build_hint(image)}) or on that engine "
            f"(DOCKER_HOST=... {build_hint(image)})"
        )
    if engine.address.registry:
        _through_registry(local, engine, image)
    else:
        _save_load(local, engine, image)
    target = _inspect(engine, image)
    if target is None or _current(target, source, image) is False:
        raise RuntimeError(f"sending {image} to the engine {engine.name} did not make it current")
    return str(target.get("Id", ""))


def _chunks(stream: Any) -> Iterator[bytes]:
    yield from stream


def _save_load(source: DockerEngine, target: DockerEngine, image: str) -> None:
    """``docker save`` on ``source`` streamed into ``docker load`` on ``target``."""
    with source.calls():
        stream = source.api.get_image(image, chunk_size=CHUNK)
    with target.calls():
        target.client.images.load(_chunks(stream))


def _consume(lines: Iterator[dict[str, Any]], what: str) -> None:
    for line in lines:
        if isinstance(line, dict) and line.get("error"):
            raise RuntimeError(f"{what}: {str(line['error'])[:300]}")


def _through_registry(source: DockerEngine, target: DockerEngine, image: str) -> None:
    """Push ``image`` to the registry from ``source``, pull it on ``target``, tag it there with
    its own name; the registry's names are removed again on both sides."""
    pull_at = str(target.address.registry)
    push_at = os.environ.get(PUSH_VARIABLE, "").strip() or pull_at
    repository, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    tag = tag or "latest"
    pushed, pulled = f"{push_at}/{repository}", f"{pull_at}/{repository}"
    with source.calls():
        source.api.tag(image, pushed, tag)
        try:
            _consume(
                source.api.push(pushed, tag, stream=True, decode=True),
                f"pushing {image} to the registry {push_at}",
            )
        finally:
            source.api.remove_image(f"{pushed}:{tag}", noprune=True)
    with target.calls():
        _consume(
            target.api.pull(pulled, tag, stream=True, decode=True),
            f"pulling {image} from the registry {pull_at} on {target.name}",
        )
        target.api.tag(f"{pulled}:{tag}", repository, tag)
        target.api.remove_image(f"{pulled}:{tag}", noprune=True)
