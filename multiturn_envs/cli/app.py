"""The parser and ``main``: one sub-command per module of this package."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from multiturn_envs.cli import (
    compare,
    dynamics,
    export,
    likelihood,
    list_envs,
    report,
    sandbox,
    serve,
    train,
)
from multiturn_envs.cli import eval as eval_cmd
from multiturn_envs.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Parser,
    UsageError,
)


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
    export.add_parser(sub)
    likelihood.add_parsers(sub)
    dynamics.add_parser(sub)
    sandbox.add_parser(sub)
    serve.add_parser(sub)
    train.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status.

    Flag ranges are checked while parsing (each flag's ``type=``, :mod:`.common`). A reader
    that closes the pipe (``multiturn-envs list | head -1``) ends the command quietly with
    status 141, as coreutils end; running out of memory on an input too large for the machine
    is one line, not a traceback.
    """
    try:
        args = build_parser().parse_args(argv)
        status = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return status
    except UsageError as exc:
        print(f"multiturn-envs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except MemoryError:
        print(
            "multiturn-envs: error: out of memory: an input file or a flag is too large for this "
            "machine",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except ImportError as exc:  # an optional extra missing: one line naming it
        from multiturn_envs.extras import missing_extra

        line = missing_extra(exc)
        if line is None:
            raise
        print(f"multiturn-envs: error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "multiturn-envs: interrupted; rerun the same command to resume where it stopped",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file behind stdout (a test's capture)
        pass
