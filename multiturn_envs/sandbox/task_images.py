"""A task's image: build it (offline, leaving nothing behind when it fails, with the real
cause), map a base that cannot be pulled onto the terminal image, and read what the env needs
from it (its working directory, environment, users, top-level directories).

``docker build`` here runs with ``--network none`` (builds must not depend on the network this
machine may or may not have), ``--rm --force-rm`` (no intermediate container left, even when a
step fails), and a failed build's intermediate images are removed as well. A failure is blamed
on what its output shows: a base image that is not in the local engine, a step that needs the
network, a package or command the (offline) base lacks, a missing file, or the step's own
error, with the step and its last lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multiturn_envs.errors import TaskUnavailable
from multiturn_envs.sandbox.dockerfile import base_images, map_base
from multiturn_envs.sandbox.terminal_image import TERMINAL_IMAGE
from multiturn_envs.untrusted import Folder

OFFLINE_DIR = "/usr/lib/mte/offline"
"""Where the terminal image keeps its offline stand-ins (``uv``, ``uvx``, ``pip``,
``apt-get``, ``curl`` for the uv installer) and the record of what they could not provide."""
OFFLINE_BIN = f"{OFFLINE_DIR}/bin"
OFFLINE_LOG = f"{OFFLINE_DIR}/missing.log"
BUILD_TIMEOUT_S = 1800.0
MAX_CONTEXT_BYTES = 1 << 30
"""A build context (a task's ``environment/``) hashed for the image's tag and sent to ``docker
build``: 1 GiB (streamed, never held in memory)."""
MAX_CONTEXT_ENTRIES = 10_000
"""Entries of a build context (and of a task's ``tests/`` folder: the task loaders' bound)."""
MAX_CONTEXT_DEPTH = 32
"""Folder levels under a build context (and under a task's ``tests/``)."""

NETWORK = re.compile(
    r"could not resolve|temporary failure (in name resolution|resolving)|network is unreachable|"
    r"failed to establish a new connection|name or service not known|couldn't resolve host|"
    r"could not connect to|no route to host|unable to access 'https?://|curl: \((6|7)\)|"
    r"getaddrinfo|connection refused|failed to fetch|unable to connect to|dial tcp|"
    r"network (is )?(disabled|unavailable)|no address associated with hostname",
    re.IGNORECASE,
)
"""What tools print when they need the network and there is none (a build's log, a reference
solution's output)."""
_PULL = re.compile(
    r"pull access denied|manifest unknown|repository does not exist|no such image|"
    r"failed to resolve reference|error response from daemon: (head|get) ",
    re.IGNORECASE,
)


class ImageUnavailable(TaskUnavailable):
    """A task's image is neither present nor buildable here; the message says why and what
    to do. ``cause`` is one word: ``base``, ``network``, ``package``, ``command``, ``file``,
    ``step`` or ``timeout``; ``log``: the build's output."""


@dataclass(frozen=True)
class ImageConfig:
    """What the env reads from an image's configuration."""

    workdir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""


def docker_client() -> Any:
    import docker

    return docker.from_env(timeout=300)


def image_exists(tag: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    return done.returncode == 0


def image_id(tag: str) -> str:
    """The image's id (``""`` when it is not in the local engine)."""
    done = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def image_config(client: Any, image: str) -> ImageConfig:
    config = client.api.inspect_image(image).get("Config") or {}
    env = {}
    for item in config.get("Env") or []:
        name, _, value = str(item).partition("=")
        env[name] = value
    return ImageConfig(str(config.get("WorkingDir") or ""), env, str(config.get("User") or ""))


def read_image_file(client: Any, image: str, path: str, cap: int = 1 << 20) -> bytes | None:
    """One small file of an image (from a created, never started, container)."""
    from multiturn_envs.sandbox.archive_stream import ContainerArchive, read_small_file

    holder = client.containers.create(image, ["true"], network_mode="none")
    try:
        return read_small_file(ContainerArchive(client.api, holder.id), path, cap)
    finally:
        with contextlib.suppress(Exception):
            holder.remove(force=True, v=True)


def resolve_user(client: Any, image: str, user: str) -> str:
    """``uid:gid`` of ``user`` (``name``, ``uid``, ``name:group``, ``uid:gid``) in an image."""
    name, _, group = user.partition(":")
    name = name or "root"
    passwd = (read_image_file(client, image, "/etc/passwd") or b"").decode("utf-8", "replace")
    groups = (read_image_file(client, image, "/etc/group") or b"").decode("utf-8", "replace")
    uid = gid = None
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and (fields[0] == name or fields[2] == name):
            uid, gid = fields[2], fields[3]
            break
    if uid is None:
        if not name.isdigit():
            raise ValueError(f"user {name!r} does not exist in the image {image}")
        uid, gid = name, name
    if group:
        gid = group if group.isdigit() else None
        for line in groups.splitlines():
            fields = line.split(":")
            if len(fields) >= 3 and fields[0] == group:
                gid = fields[2]
        if gid is None:
            raise ValueError(f"group {group!r} does not exist in the image {image}")
    return f"{uid}:{gid}"


def top_level_dirs(client: Any, image: str) -> list[str]:
    """The image's top-level directories (not links), read in a throwaway container."""
    output = client.containers.run(
        image,
        ["find", "/", "-mindepth", "1", "-maxdepth", "1", "-type", "d", "-printf", "%f\\n"],
        remove=True,
        network_mode="none",
        user="0:0",
        cap_drop=["ALL"],
        read_only=True,
    )
    return sorted(line for line in output.decode("utf-8", "replace").splitlines() if line)


def missing_offline(client: Any, image: str) -> list[str]:
    """What the terminal image's offline stand-ins could not provide while the task's image
    was built (packages not in the base, ``uv add`` of a package not installed)."""
    data = read_image_file(client, image, OFFLINE_LOG)
    if not data:
        return []
    seen: list[str] = []
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip() and line.strip() not in seen:
            seen.append(line.strip())
    return seen


def content_tag(prefix: str, folder: Path, extra: str = "") -> str:
    """``prefix:<hash of the folder's files>``: a changed task gets a new image.

    The folder is someone else's: it is walked within :data:`MAX_CONTEXT_ENTRIES`
    entries and :data:`MAX_CONTEXT_DEPTH` levels, its files streamed into the hash
    (at most :data:`MAX_CONTEXT_BYTES` in all, a larger file refused on its size,
    unread), a link hashed as its target text (never followed: a link out of the folder
    refuses the task, as it would carry a host file into the image), and a FIFO or device
    refuses it."""
    files = Folder(folder)
    digest = hashlib.sha256(extra.encode())
    tree = files.stream_tree(
        max_total_bytes=MAX_CONTEXT_BYTES,
        max_entries=MAX_CONTEXT_ENTRIES,
        max_depth=MAX_CONTEXT_DEPTH,
    )
    for entry, stream in tree:
        if entry.kind == "dir":
            continue
        digest.update(entry.path.encode() + b"\0")
        if stream is None:  # a link (inside the folder: stream_tree checked it)
            digest.update(b"link\0" + files.readlink(entry.path).encode())
            continue
        part = hashlib.sha256()
        while chunk := stream.read(1 << 20):
            part.update(chunk)
        digest.update(part.digest())
    name = re.sub(r"[^a-z0-9_.-]", "-", prefix.lower()).strip("-.") or "task"
    return f"{name}:{digest.hexdigest()[:12]}"


_NOISE = re.compile(
    r"DEPRECATED: The legacy builder|Install the buildx|docs\.docker\.com/go/buildx"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\[(?:\d+;?)*m")


def _step_lines(log: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for raw in log.splitlines():
        line = _ANSI.sub("", raw)
        if _NOISE.search(line) or not line.strip():
            continue
        if re.match(r"Step \d+/\d+ : ", line):
            steps.append((line, []))
        elif steps:
            steps[-1][1].append(line)
    return steps


_DOWNLOAD_STEP = re.compile(r"\b(wget|curl|git clone|git fetch|svn|hg clone)\b.*https?://")


def explain_build_failure(log: str, bases_missing: Iterable[str]) -> tuple[str, str]:
    """``(cause, sentence)`` for a failed ``docker build`` (see :class:`ImageUnavailable`):
    the base, a network error, a package the stand-ins could not provide, a download with
    no message of its own (``wget -q``), a missing file or command, a package the apt-get
    stand-in skipped, else the step's own error."""
    missing = list(bases_missing)
    steps = _step_lines(log)
    last_step, lines = steps[-1] if steps else ("", log.splitlines())
    text = "\n".join(lines)
    tail = [ln.strip() for ln in lines if ln.strip() and not ln.startswith(" ---> ")][-3:]
    where = f"{last_step.strip()}" if last_step else "the build"
    if missing and (not steps or re.match(r"Step 1/", last_step) or _PULL.search(text)):
        return "base", (
            f"its base image {', '.join(missing)} is not in the local engine and cannot be "
            "pulled here"
        )
    if NETWORK.search(text):
        hit = next((ln.strip() for ln in lines if NETWORK.search(ln)), "")
        return "network", f"{where} needs the network, which builds do not have: {hit}"
    refused = [ln for ln in lines if "mte-offline: not installed" in ln]
    if refused:
        return "package", f"{where} needs what the offline base lacks: {refused[-1].strip()}"
    if _DOWNLOAD_STEP.search(last_step):
        return "network", f"{where} downloads, and builds have no network: {' | '.join(tail)[:300]}"
    if re.search(r"COPY failed|ADD failed|no such file or directory", text, re.IGNORECASE):
        hits = [ln.strip() for ln in lines if "failed" in ln.lower()] or tail[-1:] or [""]
        return "file", f"{where}: a file is missing: {hits[0][:300]}"
    found = re.search(r"(\S+): (command )?not found", text)
    if found:
        return "command", f"{where}: the command {found.group(1)} is not in the base image"
    skipped = [ln for ln in lines if "mte-offline:" in ln]
    if skipped:
        return "package", f"{where} needs what the offline base lacks: {skipped[-1].strip()}"
    return "step", f"{where} failed: {' | '.join(tail)[:400]}"


def _created_images(log: str) -> list[str]:
    """Intermediate images a build made (not its base, not ones it took from the cache)."""
    ids: list[str] = []
    for step, lines in _step_lines(log):
        if re.match(r"Step 1/", step):
            continue
        cached = any("Using cache" in ln for ln in lines)
        for line in lines:
            match = re.match(r"\s*---> ([0-9a-f]{12})\s*$", line)
            if match and not cached:
                ids.append(match.group(1))
    return ids


def build_image(
    context: Path,
    dockerfile_text: str,
    tag: str,
    timeout_s: float = BUILD_TIMEOUT_S,
    build_args: Mapping[str, str] | None = None,
) -> None:
    """``docker build`` a Dockerfile (text) in ``context`` as ``tag`` (see the module
    docstring); raises :class:`ImageUnavailable` with the cause when it fails."""
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as handle:
        handle.write(dockerfile_text)
        path = handle.name
    try:
        done = subprocess.run(
            [
                "docker",
                "build",
                "--rm",
                "--force-rm",
                "--network",
                "none",
                "-f",
                path,
                "-t",
                tag,
                *[f"--build-arg={k}={v}" for k, v in (build_args or {}).items()],
                str(context),
            ],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        log = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        _remove_images(_created_images(log))
        raise ImageUnavailable(
            f"docker build of {tag} took more than {timeout_s:g} s", "timeout", log
        ) from None
    finally:
        Path(path).unlink(missing_ok=True)
    if done.returncode == 0:
        return
    log = done.stdout + "\n" + done.stderr
    _remove_images(_created_images(log))
    bases = [b for b in base_images(dockerfile_text) if b and not image_exists(b)]
    cause, why = explain_build_failure(log, bases)
    raise ImageUnavailable(why, cause, log)


def ensure_task_image(
    context: Path,
    dockerfile_text: str,
    tag: str,
    *,
    build: bool,
    mapped: bool,
    build_args: Mapping[str, str] | None = None,
) -> list[str]:
    """A task's image as ``tag``: built from ``dockerfile_text`` in ``context`` unless the
    engine has it (``build=False``: :class:`TaskUnavailable` instead). Returns the notes to
    report: for an image ``mapped`` onto the terminal image, what the offline stand-ins could
    not provide while it was built. Both loaders (Terminal-Bench 1, Harbor) end here."""
    if not image_exists(tag):
        if not build:
            raise TaskUnavailable(f"its image {tag} is not in the local engine and build=False")
        try:
            build_image(context, dockerfile_text, tag, build_args=build_args)
        except ImageUnavailable as exc:
            raise ImageUnavailable(
                f"its image cannot be built here: {exc}", exc.cause, exc.log
            ) from exc
    if not mapped:
        return []
    import docker

    client = docker.from_env()
    try:
        lacking = missing_offline(client, tag)
    finally:
        client.close()
    return ["offline, the image lacks: " + "; ".join(lacking)] if lacking else []


def _remove_images(ids: list[str]) -> None:
    for image_id in reversed(ids):
        subprocess.run(["docker", "rmi", image_id], capture_output=True, check=False)


UV_IMAGE = re.compile(r"(?:ghcr\.io/)?astral-sh/uv(?::[\w.-]+)?(?:@sha256:[0-9a-f]+)?$")
"""The image Dockerfiles copy uv from (``COPY --from=ghcr.io/astral-sh/uv:0.8 /uv /uvx /bin/``):
offline, its ``uv`` and ``uvx`` are the terminal image's stand-ins."""


def mapped_dockerfile(dockerfile_text: str, base: str = TERMINAL_IMAGE) -> tuple[str, list[str]]:
    """The Dockerfile with each ``FROM`` of an image mapped onto ``base`` and the offline
    stand-ins first on ``PATH`` for each mapped stage's steps (the env takes them off the
    agent's ``PATH`` again); a ``COPY --from=`` of the uv image copies the stand-ins
    ``uv``/``uvx`` instead. Also the images replaced (each once)."""
    text, replaced = map_base(dockerfile_text, base)
    lines: list[str] = []
    for line in text.splitlines():
        copy = re.match(r"(\s*COPY\s+(?:--\S+\s+)*)--from=(\S+)(\s.*)$", line, re.IGNORECASE)
        if copy and UV_IMAGE.match(copy.group(2)):
            words = copy.group(3).split()
            if words and all(w.rsplit("/", 1)[-1] in ("uv", "uvx") for w in words[:-1]):
                sources = [f"{OFFLINE_BIN}/{w.rsplit('/', 1)[-1]}" for w in words[:-1]]
                line = f"{copy.group(1)}--from={base} {' '.join(sources)} {words[-1]}"
                replaced.append(copy.group(2))
        lines.append(line)
        mapped = re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)", line, re.IGNORECASE)
        if mapped and mapped.group(1) == base:
            lines.append(f"ENV PATH={OFFLINE_BIN}:/usr/local/bin:/usr/bin:/bin")
    return "\n".join(lines) + "\n", list(dict.fromkeys(replaced))


def image_tar_of(client: Any, image: str, paths: Iterable[str], cap_bytes: int) -> dict[str, bytes]:
    """The image's content of ``paths`` as re-rooted trees (for ``put_archive``); missing
    paths give no tree."""
    from multiturn_envs.sandbox.archive_stream import read_archive
    from multiturn_envs.sandbox.trees import retop

    holder = client.containers.create(image, ["true"], network_mode="none")
    trees: dict[str, bytes] = {}
    try:
        for path in paths:
            raw = io.BytesIO()
            try:
                read_archive(client.api, holder.id, path, raw, cap_bytes)
            except Exception as exc:
                if "NotFound" in type(exc).__name__ or "404" in str(exc):
                    continue
                raise
            raw.seek(0)
            out = io.BytesIO()
            retop(raw, out, path)
            trees[path] = out.getvalue()
    finally:
        with contextlib.suppress(Exception):
            holder.remove(force=True, v=True)
    return trees
