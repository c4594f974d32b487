"""``multiturn-envs serve ENV_ID [...]``: an MT env over OpenEnv's protocol (docs/ecosystem.md).

The server's own parser (:func:`multiturn_envs.server.serve.build_parser`) owns the flags, so
``python -m multiturn_envs.server`` and this command take the same ones.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve an env over OpenEnv's protocol (WebSocket /ws, one env per session)",
        add_help=False,  # --help reaches the server's parser
    )
    p.add_argument("rest", nargs=argparse.REMAINDER, help="ENV_ID and the server's flags")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.server.serve import main

    return main(args.rest)
