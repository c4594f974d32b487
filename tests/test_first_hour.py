"""What a newcomer meets in the first hour works as the docs say: a plain function is a policy
for ``run_eval``, ``eval --tasks`` takes any task id the env accepts, and the docs link nothing
outside the repository."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from multiturn_envs.cli import main
from multiturn_envs.cli.app import build_parser
from multiturn_envs.harness import EvalConfig, eval_records, read_run, run_eval

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"])
PAGES += sorted((ROOT / "docs").rglob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_run_eval_takes_a_plain_function(tmp_path: Path) -> None:
    def always_right(observation: str) -> str:
        assert isinstance(observation, str)
        return "<answer>Right</answer>"

    config = EvalConfig("MT/FrozenLake-v0", "always_right", ["4x4"], 2, 3)
    summary = run_eval(config, always_right, str(tmp_path / "r.jsonl"), progress=False)
    assert summary.written == 2
    records = read_run(tmp_path / "r.jsonl").records
    assert {r["policy"] for r in records} == {"always_right"}
    assert all(a == "<answer>Right</answer>" for r in records for a in r["actions"])
    assert len(eval_records(config, lambda obs: "<answer>Down</answer>")) == 2
    with pytest.raises(TypeError, match="neither a policy"):
        run_eval(config, 42, None)  # type: ignore[arg-type]


def test_eval_tasks_takes_any_id_the_env_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.jsonl"
    args = ["eval", "MT/FrozenLake-v0", "--samples", "1", "--max-turns", "2", "-q"]
    assert main([*args, "--tasks", "4x4,8x8,map:SFH/FFG", "--out", str(out)]) == 0
    assert read_run(out).config["tasks"] == ["4x4", "8x8", "map:SFH/FFG"]
    assert main([*args, "--tasks", "4x4,nope", "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "unknown FrozenLake task id" in err and err.count("\n") == 1
    assert not (tmp_path / "x.jsonl").exists()


def _links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return LINK.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doc_link_leaves_the_repository_or_points_nowhere(page: Path) -> None:
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # a URL (https:, mailto:): not a file
            continue
        path = target.split("#", 1)[0]
        if not path:
            continue
        resolved = (page.parent / path).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name} links {target}, outside the repo"
        assert resolved.exists(), f"{page.name} links {target}, which does not exist"


def _commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[(*prefix, name)] = sub
                found.update(_commands(sub, (*prefix, name)))
    return found


def _command_lines(page: Path) -> list[str]:
    """The code of a page (fenced blocks, inline spans; a shell script whole), continuation
    lines joined: where the docs show commands."""
    raw = re.sub(r"\\\n\s*", " ", page.read_text(encoding="utf-8"))
    if page.suffix == ".sh":
        return raw.splitlines()
    blocks = re.findall(r"```.*?```", raw, flags=re.S)
    prose = re.sub(r"```.*?```", "", raw, flags=re.S)
    spans = [s.replace("\n", " ") for s in re.findall(r"`([^`]+)`", prose)]
    return [line for block in blocks for line in block.splitlines()] + spans


SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


@pytest.mark.parametrize("page", PAGES + SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_a_page_gives_a_command_is_one_it_takes(page: Path) -> None:
    """``dynamics --steps`` was documented while the flag is ``--checkpoint-steps``: every
    ``multiturn-envs <command> ... --flag`` shown in the docs must name a flag of that command."""
    commands = _commands(build_parser())
    wrong = []
    for line in _command_lines(page):
        for match in re.finditer(r"multiturn-envs((?: [a-z][a-z-]*){1,3})([^|#`]*)", line):
            words = match[1].split()
            command = next(
                (
                    tuple(words[:n])
                    for n in range(len(words), 0, -1)
                    if tuple(words[:n]) in commands
                ),
                None,
            )
            if command is None:
                continue
            known = {s for a in commands[command]._actions for s in a.option_strings}
            tail = " ".join(words[len(command) :]) + match[2]
            wrong += [
                f"{' '.join(command)} {flag}"
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", tail)
                if flag not in known
            ]
    assert wrong == [], f"{page.name} shows flags its commands do not take: {wrong}"
