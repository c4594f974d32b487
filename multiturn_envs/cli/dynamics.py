"""``multiturn-envs dynamics``: trajectory vs step reward across checkpoints."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from multiturn_envs.cli.common import (
    STEP_LIST,
    add_ci_args,
    add_flags,
    user_errors,
    write_json,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dynamics",
        help="trajectory vs step reward across checkpoints",
        description="Trajectory reward and mean step score of each checkpoint's record file, "
        "with\nbootstrap intervals (docs/analyses.md).",
        epilog="multiturn-envs dynamics ck0.jsonl ck5.jsonl --checkpoint-steps 0,5 --plot dyn.png",
    )
    p.add_argument("files", nargs="+", help="one record file per checkpoint, in training order")
    p.add_argument("--labels", default=None, help="comma-separated checkpoint names")
    p.add_argument(
        "--checkpoint-steps",
        type=STEP_LIST,
        default=None,
        help="the training step of each file (x axis)",
    )
    p.add_argument(
        "--trajectory-reward",
        choices=("success", "return"),
        default="success",
        help="per trajectory: success (0/1) or the summed env reward",
    )
    p.add_argument("--plot", default=None, metavar="PNG", help="write the two curves here")
    add_ci_args(p)
    add_flags(p, "--json-out", "--overwrite")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """One record file per checkpoint, in order."""
    from multiturn_envs.harness import plot_dynamics, read_run, training_dynamics

    with user_errors():
        runs = [read_run(f) for f in args.files]
        names = args.labels.split(",") if args.labels else [Path(r.path).stem for r in runs]
        result = training_dynamics(
            [r.records for r in runs],
            names,
            steps=args.checkpoint_steps,
            kind=args.trajectory_reward,
            n_boot=args.bootstrap,
            alpha=args.alpha,
            seed=args.bootstrap_seed,
        )
        text = result.format()
        if args.plot is not None:
            text += f"\nPlot: {plot_dynamics(result, args.plot, args.overwrite)}"
    print(text + write_json(args.json_out, result.to_dict(), args.overwrite))
    return 0
