"""``multiturn-envs sandbox ...``: sandbox images.

``sandbox build|status|reap`` is the DeepCoder code sandbox (:mod:`multiturn_envs.sandbox.image`);
``sandbox terminal build|status`` is MT/Terminal-v0's shell image
(:mod:`multiturn_envs.envs.terminal.image`). Both build offline when no registry answers.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sandbox", help="sandbox images: `sandbox build`, `sandbox terminal build`")
    p.add_argument("sandbox_command", help="build | status | reap | terminal")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the sandbox command")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.sandbox_command == "terminal":
        from multiturn_envs.envs.terminal.image import main as terminal_main

        return int(terminal_main(list(args.rest)) or 0)
    from multiturn_envs.sandbox.image import main

    return int(main([args.sandbox_command, *args.rest]) or 0)
