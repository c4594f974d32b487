"""``multiturn-envs list``: every MT/* id with the first line of its env class's docstring."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

import gymnasium as gym

from multiturn_envs.extras import ENV_EXTRAS, MissingExtra, require


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "list",
        help="list the MT/* env ids",
        description="Every MT/* id with the first line of its env's docstring (an env whose "
        "optional\ndependencies are missing is listed as unavailable, with the reason).",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import multiturn_envs

    ids = sorted({*multiturn_envs.env_ids(), *(i for i in gym.registry if i.startswith("MT/"))})
    width = max((len(i) for i in ids), default=0)
    for env_id in ids:
        spec = gym.registry.get(env_id)
        line = ""
        try:
            entry: Any = spec.entry_point if spec is not None else None
            if isinstance(entry, str):
                module_name, _, attr = entry.partition(":")
                entry = getattr(importlib.import_module(module_name), attr)
            doc = (getattr(entry, "__doc__", None) or "").strip()
            line = doc.splitlines()[0] if doc else ""
        except Exception as exc:  # an env whose optional deps are missing still gets listed
            line = f"(unavailable here: {type(exc).__name__}: {exc})"
        needs = ENV_EXTRAS.get(env_id)
        if needs is not None:
            try:
                require(env_id, *needs)
            except MissingExtra as exc:
                line = f"(unavailable here: {exc})"
        print(f"{env_id:<{width}}  {line}")
    return 0
