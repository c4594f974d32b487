"""The docs cannot drift silently: every Python block of README.md and docs/ runs, and every
relative link (file and ``#anchor``) resolves.

A file's blocks run in order in one namespace (a later block may use an earlier one's names), in
a temporary folder. A block that cannot run here says so in an HTML comment on the line before
its fence (CONTRIBUTING.md, "Docs"):

* ``<!-- docs-test: skip: why -->``: never run (an LLM, a GPU, a dataset download, a fragment);
* ``<!-- docs-test: docker -->``: runs where the Docker sandbox images are ready (always under
  ``CI=true``, where a missing engine fails instead of skipping).
"""

from __future__ import annotations

import re
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import pytest

from multiturn_envs.testing import require_docker, require_terminal_image

ROOT = Path(__file__).resolve().parents[1]
TOP_PAGES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")
PAGES = sorted([*(ROOT / name for name in TOP_PAGES), *ROOT.glob("docs/**/*.md")])
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.S | re.M
)
MARK = re.compile(r"<!--\s*docs-test:\s*(?P<kind>skip|docker)\b:?\s*(?P<why>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    mark: str | None  # None, "skip" or "docker"
    why: str


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        found.append(
            Block(
                page,
                text.count("\n", 0, m.start()) + 1,
                textwrap.dedent(m.group("code")),
                mark.group("kind") if mark else None,
                mark.group("why") if mark else "",
            )
        )
    return found


RUNNABLE = [p for p in PAGES if p.exists() and any(b.mark != "skip" for b in blocks(p))]


def _docker_ready() -> None:
    require_docker()
    require_terminal_image()


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_the_python_blocks_of_a_page_run(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = set(gym.registry)
    module = types.ModuleType(f"docs_page_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up
    namespace = module.__dict__
    ran = 0
    try:
        for block in blocks(page):
            where = f"{page.relative_to(ROOT)}:{block.line}"
            if block.mark == "skip":
                assert block.why, f"{where}: say why a block is skipped (docs-test: skip: why)"
                continue
            if block.mark == "docker":
                _docker_ready()
            try:
                exec(compile(block.code, where, "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"the block at {where} fails: {exc!r}") from exc
            ran += 1
    finally:
        for env in namespace.values():
            if isinstance(env, gym.Env):
                env.close()
        for env_id in set(gym.registry) - before:
            gym.registry.pop(env_id, None)
    if ran == 0:
        pytest.skip(f"the blocks of {page.name} need Docker")


def test_every_skip_mark_sits_on_a_python_block() -> None:
    for page in PAGES:
        if not page.exists():
            continue
        text = CODE.sub("", page.read_text(encoding="utf-8"))  # a mark quoted in code is no mark
        marks = len(re.findall(r"<!--\s*docs-test:", text))
        assert marks == sum(b.mark is not None for b in blocks(page)), (
            f"{page.relative_to(ROOT)}: a docs-test mark must be the line right before a "
            "```python fence"
        )


# ------------------------------------------------------------------------------------ links
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCED = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.S | re.M)
CODE = re.compile(rf"{FENCED.pattern}|`[^`\n]*`", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def _links() -> Iterator[tuple[Path, str]]:
    for page in PAGES:
        if page.exists():
            text = CODE.sub("", page.read_text(encoding="utf-8"))
            for m in LINK.finditer(text):
                yield page, m.group("target")


def test_every_relative_link_resolves() -> None:
    broken = []
    for page, target in _links():
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(ROOT)} -> {target}"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{where}: no heading with that anchor")
    assert broken == [], "\n".join(broken)


def test_the_link_checker_sees_links_and_anchors() -> None:
    # it must find what it checks: links of every kind, headings with code and punctuation
    targets = {t for _, t in _links()}
    assert any(t.endswith(".md") for t in targets) and any("#" in t for t in targets)
    assert _slug("The `multiturn-envs` command") == "the-multiturn-envs-command"
    assert _slug("Time: per-test limit, stop after a timeout") == (
        "time-per-test-limit-stop-after-a-timeout"
    )


def test_blocks_reads_marks_indented_fences_and_fences_inside_strings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro\n\n<!-- docs-test: skip: needs a GPU -->\n```python\nimport torch\n```\n\n"
        "- a list item:\n\n  ```python\n  x = '```bash\\nls\\n```'\n  y = 1\n  ```\n\n"
        "<!-- docs-test: docker -->\n```python\nz = 2\n```\n",
        encoding="utf-8",
    )
    found = blocks(page)
    assert [(b.mark, b.why) for b in found] == [
        ("skip", "needs a GPU"),
        (None, ""),
        ("docker", ""),
    ]
    namespace: dict[str, object] = {}
    exec(found[1].code, namespace)  # dedented, and the fence inside the string did not end it
    assert namespace["y"] == 1 and str(namespace["x"]).startswith("```bash")
    assert [b.line for b in found] == [4, 10, 16]
