"""``multiturn-envs report``: Pass@(K,T) tables, intervals and PNG plots from record files."""

from __future__ import annotations

import argparse
from typing import Any

from multiturn_envs.cli.common import SAMPLE_LIST, TURN_LIST, add_ci_args, add_flags, user_errors


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="Pass@(K,T) tables and PNG plots from record files",
        description="""\
Prints the Pass@(K,T) table of each file (with a bootstrap interval over tasks) and, for each
file after the first, the table of its difference to the first with a paired interval over
their common tasks; writes <stem>_heatmap.png, <stem>_k_curves.png and <stem>_t_curves.png
(for several files the stem is a_vs_b).""",
        epilog="multiturn-envs report runs/random.jsonl runs/expert.jsonl --out-dir runs/plots",
    )
    p.add_argument("files", nargs="+", help="one or more .jsonl record files")
    p.add_argument("--out-dir", default=None, help="where PNGs go (default: beside the first file)")
    p.add_argument(
        "--ks", type=SAMPLE_LIST, default=None, help="comma-separated K values (default 1..n)"
    )
    p.add_argument(
        "--ts", type=TURN_LIST, default=None, help="comma-separated T values (default 1..T_max)"
    )
    add_ci_args(p)
    p.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    p.add_argument(
        "--prices",
        default=None,
        metavar="FILE.json",
        help="a price table (docs/harness.md): print each run's cost in all, per episode and "
        "per success",
    )
    add_flags(p, "--overwrite")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.harness.report import main_report

    with user_errors(KeyError, missing="no such record file"):
        text = main_report(
            args.files,
            out_dir=args.out_dir,
            ks=args.ks,
            ts=args.ts,
            n_boot=args.bootstrap,
            alpha=args.alpha,
            seed=args.bootstrap_seed,
            plots=not args.no_plots,
            prices=args.prices,
            overwrite=args.overwrite,
        )
    print(text)
    return 0
