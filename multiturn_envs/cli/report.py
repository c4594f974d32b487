"""``multiturn-envs report``: Pass@(K,T) tables, intervals and PNG plots from record files."""

from __future__ import annotations

import argparse
from typing import Any

from multiturn_envs.cli.common import ALPHA, BOOTSTRAP, SEED, int_list, user_errors


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="Pass@(K,T) tables and PNG plots from record files")
    p.add_argument("files", nargs="+", help="one or more .jsonl record files")
    p.add_argument("--out-dir", default=None, help="where PNGs go (default: beside the first file)")
    p.add_argument("--ks", default=None, help="comma-separated K values (default 1..n)")
    p.add_argument("--ts", default=None, help="comma-separated T values (default 1..T_max)")
    p.add_argument(
        "--bootstrap",
        type=BOOTSTRAP,
        default=2000,
        help="bootstrap resamples over tasks for CIs (0: none)",
    )
    p.add_argument("--alpha", type=ALPHA, default=0.05, help="1 - confidence level")
    p.add_argument("--seed", type=SEED, default=0, help="bootstrap seed")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.harness.report import main_report

    ks = int_list(args.ks, "--ks") if args.ks else None
    ts = int_list(args.ts, "--ts") if args.ts else None
    with user_errors(KeyError, missing="no such record file"):
        text = main_report(
            args.files,
            out_dir=args.out_dir,
            ks=ks,
            ts=ts,
            n_boot=args.bootstrap,
            alpha=args.alpha,
            seed=args.seed,
            plots=not args.no_plots,
        )
    print(text)
    return 0
