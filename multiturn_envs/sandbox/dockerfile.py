"""Reading a task's Dockerfile: its instructions, its base image, and whether the env can build
the task's starting state without ``docker build``.

``docker build`` (the legacy builder here) commits a layer per step: ~5 s for a three-step
Dockerfile on this machine, ~3 min for the 39 bundled tasks. Most task Dockerfiles built on a
local image only copy files and run a setup script, and every file such a task needs lives in
the directories the agent can write (``/app``, ``/tmp``): the env then builds the starting
state as it runs any episode, in a hardened container of the base image (``light build``,
:func:`light_plan`), and keeps the result. A Dockerfile with anything else (another stage,
``SHELL``, ``VOLUME``, a URL or archive in ``ADD``, a heredoc), or a step that writes outside
those directories, gets a real ``docker build``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.untrusted import Folder

IGNORED = frozenset(
    {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "HEALTHCHECK", "STOPSIGNAL", "MAINTAINER", "ONBUILD"}
)
"""Instructions that change no file (a light build skips them)."""
LIGHT = frozenset({"FROM", "COPY", "ADD", "RUN", "WORKDIR", "ENV", "USER", "ARG"}) | IGNORED


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: ``keyword`` (upper case), its argument text, its line."""

    keyword: str
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile (comments dropped, continuation lines joined)."""
    escape = "\\"
    lines = text.splitlines()
    for line in lines:  # parser directives come first, as comments
        match = re.match(r"\s*#\s*escape\s*=\s*(\S)", line, re.IGNORECASE)
        if match:
            escape = match.group(1)
            break
        if not re.match(r"\s*#\s*\w+\s*=", line):
            break
    out: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = number
        if stripped.endswith(escape) and not stripped.endswith(escape * 2):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        joined = " ".join(part.strip() for part in buf if part.strip())
        buf = []
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    if buf:
        joined = " ".join(part.strip() for part in buf if part.strip())
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    return out


def from_image(instruction: Instruction) -> str:
    """The image a ``FROM`` names (flags such as ``--platform`` and ``AS name`` dropped)."""
    words = [w for w in instruction.args.split() if not w.startswith("--")]
    return words[0] if words else ""


def stage_name(instruction: Instruction) -> str:
    """The name a ``FROM ... AS name`` gives its stage (lower case; ``""`` without one)."""
    words = [w for w in instruction.args.split() if not w.startswith("--")]
    if len(words) >= 3 and words[1].lower() == "as":
        return words[2].lower()
    return ""


def global_args(steps: list[Instruction], build_args: Mapping[str, str]) -> dict[str, str]:
    """The ``ARG`` values declared before the first ``FROM`` (their defaults, or
    ``build_args``): the only variables a ``FROM`` line can use."""
    args: dict[str, str] = {}
    for step in steps:
        if step.keyword == "FROM":
            break
        if step.keyword == "ARG":
            name, _, default = step.args.partition("=")
            name = name.strip()
            args[name] = build_args.get(name, default.strip().strip('"'))
    return args


def base_images(text: str, build_args: Mapping[str, str] | None = None) -> list[str]:
    """Every image the Dockerfile builds on, in order, without repeats: each ``FROM`` that
    names no earlier stage (``FROM build`` after ``FROM x AS build`` is not an image) and
    each image a ``COPY --from=`` names. ``build_args`` fill the ``ARG`` defaults in."""
    steps = parse_dockerfile(text)
    args = global_args(steps, build_args or {})
    stages: set[str] = set()
    images: list[str] = []
    for step in steps:
        if step.keyword == "FROM":
            image = substitute(from_image(step), args)
            if image.lower() not in stages and image not in images:
                images.append(image)
            if stage_name(step):
                stages.add(stage_name(step))
        elif step.keyword in ("COPY", "ADD"):
            source = copy_from(step)
            stage = source.isdigit() or source.lower() in stages
            if source and not stage and source not in images:
                images.append(source)
    return images


def copy_from(instruction: Instruction) -> str:
    """The stage or image a ``COPY --from=X`` copies from (``""`` for a plain ``COPY``)."""
    match = re.search(r"(?:^|\s)--from=(\S+)", instruction.args)
    return match.group(1) if match else ""


def map_base(text: str, base: str) -> tuple[str, list[str]]:
    """The Dockerfile with every ``FROM`` of an image replaced by ``base`` (a ``FROM`` of an
    earlier stage stays); also the images replaced."""
    replaced: list[str] = []
    stages: set[str] = set()
    out = []
    for line in text.splitlines():
        match = re.match(r"(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", line, re.IGNORECASE)
        if match:
            alias = re.match(r"\s+AS\s+(\S+)", match.group(4), re.IGNORECASE)
            if match.group(3).lower() not in stages:
                replaced.append(match.group(3))
                line = f"{match.group(1)}{match.group(2)}{base}{match.group(4)}"
            if alias:
                stages.add(alias.group(1).lower())
        out.append(line)
    return "\n".join(out) + "\n", replaced


@dataclass(frozen=True)
class BuildPlan:
    """How a task's image is made: ``docker build`` of ``context`` with ``dockerfile`` (text),
    or, when ``light`` is true, the steps run by the env on a container of ``base``."""

    context: str
    dockerfile: str
    base: str
    steps: tuple[Instruction, ...] = ()
    light: bool = False
    why_not_light: str = ""
    build_args: Mapping[str, str] = field(default_factory=dict)


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """``$VAR``, ``${VAR}`` and ``${VAR:-default}`` replaced as ``docker build`` does."""

    def repl(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        value = variables.get(name, "")
        if not value and default is not None:
            return default
        return value

    return re.sub(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))", repl, text)


def parse_env(args: str) -> dict[str, str]:
    """``ENV k=v k2="v 2"`` or ``ENV k v`` (the old one-variable form)."""
    words = shlex.split(args, posix=True)
    if words and "=" not in words[0]:
        name, _, value = args.strip().partition(" ")
        return {name: value.strip()}
    out = {}
    for word in words:
        name, _, value = word.partition("=")
        out[name] = value
    return out


def copy_args(args: str) -> tuple[dict[str, str], list[str], str]:
    """``(flags, sources, dest)`` of a ``COPY``/``ADD`` (shell or JSON form)."""
    flags: dict[str, str] = {}
    rest = args.strip()
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        name, _, value = flag[2:].partition("=")
        flags[name] = value
        rest = rest.strip()
    if rest.startswith("["):
        words = [str(w) for w in json.loads(rest)]
    else:
        words = shlex.split(rest, posix=True)
    if len(words) < 2:
        raise ValueError(f"COPY/ADD needs a source and a destination: {args!r}")
    return flags, words[:-1], words[-1]


def resolve_base(steps: list[Instruction], build_args: Mapping[str, str]) -> str:
    """The image the first ``FROM`` names, with the ``ARG`` defaults (or ``build_args``)
    declared before it substituted."""
    froms = [s for s in steps if s.keyword == "FROM"]
    return substitute(from_image(froms[0]), global_args(steps, build_args)) if froms else ""


def light_plan(
    context: Path, dockerfile_text: str, build_args: Mapping[str, str] | None = None
) -> BuildPlan:
    """The build plan of a Dockerfile, light when its steps allow it (see the module
    docstring; whether its base is in the local engine is decided when it is built)."""
    steps = parse_dockerfile(dockerfile_text)
    args = dict(build_args or {})
    base = resolve_base(steps, args)

    def heavy(why: str) -> BuildPlan:
        return BuildPlan(str(context), dockerfile_text, base, tuple(steps), False, why, args)

    froms = [s for s in steps if s.keyword == "FROM"]
    before = [s for s in steps[: steps.index(froms[0])] if s.keyword != "ARG"] if froms else []
    if len(froms) != 1 or before:
        return heavy("the Dockerfile has more than one stage, or steps before FROM")
    for step in steps:
        if step.keyword not in LIGHT:
            return heavy(f"line {step.line}: {step.keyword} needs docker build")
        if step.keyword in ("RUN", "COPY", "ADD") and "<<" in step.args:
            return heavy(f"line {step.line}: heredocs need docker build")
        if step.keyword in ("COPY", "ADD"):
            try:
                flags, sources, _ = copy_args(step.args)
            except ValueError as exc:
                return heavy(f"line {step.line}: {exc}")
            if set(flags) - {"chown"}:
                return heavy(f"line {step.line}: {step.keyword} --{'/--'.join(flags)}")
            for source in sources:
                if "://" in source:
                    return heavy(f"line {step.line}: ADD of a URL")
                if step.keyword == "ADD" and re.search(r"\.(tar|tgz|gz|bz2|xz|zst)$", source):
                    return heavy(f"line {step.line}: ADD of an archive")
                if any(ch in source for ch in "*?[$"):
                    return heavy(f"line {step.line}: patterns in {step.keyword}")
                if ".." in Path(source).parts or source.startswith("/"):
                    return heavy(f"line {step.line}: {source} leaves the build context")
                try:  # the context is someone else's: a link out of it is no source
                    present = Folder(context).exists(source)
                except UntrustedInputError as exc:
                    return heavy(f"line {step.line}: {exc}")
                if not present:
                    return heavy(f"line {step.line}: {source} is not in the build context")
    return BuildPlan(str(context), dockerfile_text, base, tuple(steps), True, "", args)
