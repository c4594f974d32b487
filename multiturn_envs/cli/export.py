"""``multiturn-envs export``: a record file in another tool's format (inspect_ai's eval log)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from multiturn_envs.cli.common import UsageError, add_ci_args, add_flags, user_errors


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="write a record file as an inspect_ai eval log (inspect view shows it)",
        description="""\
Write a record file as an inspect_ai eval log: one sample per trajectory (its messages and tool
calls, rebuilt by replaying the record), each turn's oracle step score in the transcript, the
budget, the outcome and the first-success turn, the run's header as the eval's spec, and the
Pass@(K,T) surface with its bootstrap intervals in the results. `inspect view` shows it. Needs
the [inspect] extra. The output is a new file; an existing one is replaced only with
--overwrite and only when this command wrote it (docs/harness.md).""",
        epilog="""\
multiturn-envs export runs/noisy.jsonl --format inspect
inspect view start --log-dir runs""",
    )
    p.add_argument("file", help="the .jsonl record file")
    p.add_argument(
        "--format",
        choices=("inspect",),
        default="inspect",
        help="inspect: inspect_ai's eval log (the only format so far)",
    )
    p.add_argument(
        "--log",
        default=None,
        metavar="FILE.eval",
        help="the log to write: .eval (inspect's default) or .json (default: the record file's "
        "name with .eval)",
    )
    add_flags(p, "--overwrite")
    p.add_argument(
        "--no-replay",
        action="store_true",
        help="do not replay the episodes (for an env that cannot run here): the messages hold "
        "the actions only",
    )
    add_ci_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.errors import ReplayError
    from multiturn_envs.harness.inspect_log import export_inspect

    with user_errors(ReplayError, missing="no such record file"):
        try:
            path = export_inspect(
                args.file,
                args.log,
                overwrite=args.overwrite,
                replay=not args.no_replay,
                n_boot=args.bootstrap,
                alpha=args.alpha,
                seed=args.bootstrap_seed,
            )
        except ReplayError as exc:
            raise UsageError(f"{exc} (--no-replay exports without replaying)") from None
    print(f"written: {path}", file=sys.stderr)
    return 0
