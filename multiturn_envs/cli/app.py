"""The parser and ``main``: one sub-command per module of this package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from multiturn_envs.cli import (
    compare,
    dynamics,
    likelihood,
    list_envs,
    report,
    sandbox,
    serve,
    train,
)
from multiturn_envs.cli import eval as eval_cmd
from multiturn_envs.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, Parser, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="multiturn-envs",
        description="Multi-turn text environments and the Pass@(K,T) harness.",
    )
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    sub.required = True
    list_envs.add_parser(sub)
    eval_cmd.add_parser(sub)
    report.add_parser(sub)
    compare.add_parser(sub)
    likelihood.add_parsers(sub)
    dynamics.add_parser(sub)
    sandbox.add_parser(sub)
    serve.add_parser(sub)
    train.add_parser(sub)
    return parser


def _check_ranges(args: argparse.Namespace) -> None:
    for name in ("samples", "max_turns", "in_flight", "workers", "actions"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    for name in ("error_after", "seed", "bootstrap"):
        value = getattr(args, name, None)
        if value is not None and value < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {value}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        _check_ranges(args)
        return int(args.func(args))
    except UsageError as exc:
        print(f"multiturn-envs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "multiturn-envs: interrupted; rerun the same command to resume where it stopped",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
