"""The command line is the one place for flags (issue 23).

* a spelling that several commands take has one definition (``cli/common.py``'s ``FLAGS``):
  the same destination, type (range), choices, help and default everywhere (``train``'s
  defaults are ``None``: its flags overlay a config file);
* docs/cli.md is what the parsers generate (``python -m multiturn_envs.cli.docs``);
* the library takes arguments, never argv: no argparse outside ``multiturn_envs/cli``, and no
  error the library raises names a CLI flag.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest

from multiturn_envs.cli.app import build_parser
from multiturn_envs.cli.common import FLAGS
from multiturn_envs.cli.docs import render

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "multiturn_envs"
OVERLAY_COMMANDS = {"train"}  # flags override a config file's fields: default None


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"{prefix}{name}", sub))
                found += _commands(sub, f"{prefix}{name} ")
    return found


def _options() -> dict[str, list[tuple[str, argparse.Action]]]:
    by_spelling: dict[str, list[tuple[str, argparse.Action]]] = defaultdict(list)
    for command, parser in _commands(build_parser()):
        for action in parser._actions:
            for spelling in action.option_strings:
                if spelling not in ("-h", "--help"):
                    by_spelling[spelling].append((command, action))
    return by_spelling


def _definition(command: str, action: argparse.Action) -> tuple[object, ...]:
    default = action.default
    if command in OVERLAY_COMMANDS and type(action) is argparse._StoreAction:
        assert default is None, f"train's {action.option_strings} must default to None"
        default = "<overlay>"
    return (
        tuple(action.option_strings),
        action.dest,
        type(action).__name__,
        action.type,
        tuple(action.choices) if action.choices is not None else None,
        action.help,
        action.metavar,
        default,
    )


def test_a_shared_spelling_has_one_definition() -> None:
    shared = {s: uses for s, uses in _options().items() if len({c for c, _ in uses}) > 1}
    assert {"--seed", "--max-turns", "--env-arg", "--bootstrap", "--json-out"} <= set(shared)
    for spelling, uses in shared.items():
        assert any(spelling in f.names for f in FLAGS.values()), (
            f"{spelling} is taken by {[c for c, _ in uses]}: define it once in cli/common.py FLAGS"
        )
        plain = {_definition(c, a)[:-1] for c, a in uses}
        assert len(plain) == 1, f"{spelling} has {len(plain)} definitions: {plain}"
        defaults = {repr(_definition(c, a)[-1]) for c, a in uses if c not in OVERLAY_COMMANDS}
        assert len(defaults) <= 1, f"{spelling} has several defaults: {defaults}"


def test_the_renamed_flags_mean_one_thing_each() -> None:
    options = _options()
    # --seed is a run's seed; the analyses' bootstrap seed is --bootstrap-seed
    assert {c for c, _ in options["--seed"]} == {"eval", "compare", "train"}
    assert {c for c, _ in options["--bootstrap-seed"]} == {
        "report",
        "nll",
        "llr",
        "dynamics",
        "export",
    }
    # --out is eval's record file only; JSON results are --json-out, train's folder --output-dir
    assert {c for c, _ in options["--out"]} == {"eval"}
    assert {c for c, _ in options["--json-out"]} == {"compare", "nll", "llr", "dynamics"}
    assert {c for c, _ in options["--output-dir"]} == {"train"}
    # --error-after: no injected error unless given, in eval and compare alike
    assert all(a.default is None for _, a in options["--error-after"])


def test_compare_continuation_asks_for_error_after(capsys: pytest.CaptureFixture[str]) -> None:
    from multiturn_envs.cli import EXIT_USAGE, main

    args = ["compare", "MT/FrozenLake-v0", "--mode", "continuation"]
    assert main([*args, "--policy-a", "expert", "--policy-b", "random"]) == EXIT_USAGE
    assert "--error-after" in capsys.readouterr().err


def test_docs_cli_md_is_what_the_parsers_generate() -> None:
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    expected = render()
    assert written == expected, (
        "docs/cli.md is stale: regenerate it with `python -m multiturn_envs.cli.docs > docs/cli.md`"
    )
    for command, _ in _commands(build_parser()):
        assert f"## `{command}`" in written
    for command in ("train", "nll", "llr", "dynamics", "sandbox terminal build", "serve"):
        assert f"## `{command}`" in written
    for spelling in _options():
        assert f"`{spelling}" in written, spelling


@functools.cache
def _library_trees() -> tuple[tuple[Path, ast.Module], ...]:
    """Every library module outside ``cli/``, parsed once for the tests below."""
    paths = [p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts[:1]]
    return tuple((p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(paths))


def test_no_argparse_outside_the_cli() -> None:
    offenders = []
    for path, tree in _library_trees():
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "argparse" in names:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], f"parse argv in multiturn_envs/cli only: {offenders}"


def test_no_library_error_names_a_cli_flag() -> None:
    flags = sorted(_options(), key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(f) + r"(?![\w-])" for f in flags if f.startswith("--")))
    offenders = []
    for path, tree in _library_trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            for const in ast.walk(node.exc):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    hit = pattern.search(const.value)
                    if hit:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {hit.group()}")
    assert offenders == [], f"library errors speak of arguments, not CLI flags: {offenders}"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", "MT/NoSuchEnv-v0"], "unknown env id 'MT/NoSuchEnv-v0'"),
        (["serve", "MT/FrozenLake-v0", "--env-arg", "novalue"], "--env-arg: "),
        (["serve", "MT/FrozenLake-v0", "--host", "0.0.0.0"], "bearer token"),
        (["sandbox", "terminal"], "COMMAND"),
        (["sandbox", "build", "--tag"], "--tag"),
    ],
)
def test_serve_and_sandbox_mistakes_are_one_line_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from multiturn_envs.cli import EXIT_USAGE, main

    monkeypatch.delenv("MTE_SERVE_TOKEN", raising=False)
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("multiturn-envs: error: ") and says in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "x.jsonl", "--ks", "0,1"],
        ["report", "x.jsonl", "--ts", "1,x"],
        ["eval", "MT/FrozenLake-v0", "--turn-grid", ","],
        ["train", "--budget-mix", "2,1000000000"],
        ["dynamics", "x.jsonl", "--checkpoint-steps", "-1"],
        ["report", "x.jsonl", "--ts", ",".join(["1"] * 10_001)],
    ],
)
def test_list_flags_are_checked_while_parsing(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from multiturn_envs.cli import EXIT_USAGE, main

    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("--"))
    assert err.count("\n") == 1 and flag in err and "comma-separated integers in" in err, err
