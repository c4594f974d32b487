"""``multiturn-envs sandbox ...``: sandbox images (``sandbox build``, ``sandbox status``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sandbox", help="sandbox images (e.g. `sandbox build`)")
    p.add_argument("sandbox_command", help="e.g. build")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the sandbox command")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.image import main

    return int(main([args.sandbox_command, *args.rest]) or 0)
