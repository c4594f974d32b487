"""Variants of the terminal image (``sandbox terminal build --tag T [--extras]``) never replace
the default image or its base, whatever the tag: each gets a base of its own, and the extras
are refused under the default tag."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.sandbox.recipes import image_recipes
from multiturn_envs.sandbox.terminal_image import (
    BASE_IMAGE,
    EXTRAS_IMAGE,
    IMAGE_VARIABLE,
    TERMINAL_IMAGE,
    base_tag,
    build,
    build_tag,
)

_COMPONENT = r"[a-z0-9]+(?:[._-][a-z0-9]+)*"
_TAG = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*:[\w][\w.-]{{0,127}}")
"""A name and a tag as docker accepts them (a registry host with a port aside)."""


def test_the_default_image_alone_builds_on_the_shared_base() -> None:
    assert base_tag(TERMINAL_IMAGE) == BASE_IMAGE
    tags = [
        "mine",
        "mine:latest",
        "multiturn-envs-terminal",
        EXTRAS_IMAGE,
        "multiturn-envs-terminal:Latest",
        "multiturn-envs-terminal-base:latest",
        "registry.example:5000/team/terminal:1.0",
    ]
    bases = [base_tag(t) for t in tags]
    assert BASE_IMAGE not in bases and len(set(bases)) == len(tags)
    for base in bases:
        assert _TAG.fullmatch(base), base


@given(st.from_regex(r"[a-z0-9][a-z0-9._/-]{0,40}(:\w[\w.-]{0,20})?", fullmatch=True))
def test_no_tag_but_the_default_gets_the_shared_base(tag: str) -> None:
    base = base_tag(tag)
    assert (base == BASE_IMAGE) == (tag == TERMINAL_IMAGE)
    assert _TAG.fullmatch(base), base


def test_the_extras_are_never_built_under_the_default_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IMAGE_VARIABLE, raising=False)
    assert build_tag(None, extras=False) == TERMINAL_IMAGE
    assert build_tag(None, extras=True) == EXTRAS_IMAGE  # no tag named: the extras' own
    assert build_tag("mine:1", extras=True) == "mine:1"
    with pytest.raises(RuntimeError, match="lean default image"):
        build_tag(TERMINAL_IMAGE, extras=True)
    with pytest.raises(RuntimeError, match="lean default image"):
        build(tag=TERMINAL_IMAGE, extras=True)  # refused before anything is built
    monkeypatch.setenv(IMAGE_VARIABLE, "mine:2")
    assert build_tag(None, extras=True) == "mine:2"


def _image_id(tag: str) -> str:
    done = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True
    )
    return done.stdout.strip()


@pytest.mark.docker
def test_building_a_variant_leaves_the_default_images_as_they_were(
    terminal_ready: None, tmp_path: Path
) -> None:
    """A real ``build`` of a variant named like the default (``multiturn-envs-terminal`` with
    another tag), with the extras. Its bootstrap (debootstrap, minutes) is replaced by one that
    only records the base it is asked for and tags the default base as it: what is under test
    is which images ``build`` writes."""
    with image_recipes() as folder:
        shutil.copytree(folder, tmp_path / "images")
    asked = tmp_path / "asked"
    (tmp_path / "images" / "bootstrap.sh").write_text(
        f'#!/usr/bin/env bash\nset -eu\necho "$1" > {asked}\ndocker tag {BASE_IMAGE} "$1"\n'
    )
    tag = "multiturn-envs-terminal:mte-test-variant"
    before = {t: _image_id(t) for t in (TERMINAL_IMAGE, BASE_IMAGE)}
    try:
        said = build(sandboxes_dir=tmp_path / "images", tag=tag, extras=True)
        assert asked.read_text().strip() == base_tag(tag) and f"built {tag}" in said
        assert _image_id(tag) and _image_id(tag) != before[TERMINAL_IMAGE]
        assert {t: _image_id(t) for t in before} == before
    finally:
        subprocess.run(["docker", "rmi", tag, base_tag(tag)], capture_output=True)
