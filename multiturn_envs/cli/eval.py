"""``multiturn-envs eval``: run a policy on an env, N tasks x K samples, JSONL records."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multiturn_envs.cli.common import (
    ERROR_AFTER,
    IN_FLIGHT,
    MAX_TURNS,
    SAMPLES,
    SEED,
    WORKERS,
    UsageError,
    add_env_args,
    add_executor_args,
    env_tasks,
    executor_of,
    int_list,
    load_policy,
    parse_env_args,
    resolve_tasks,
    user_errors,
)
from multiturn_envs.core import TextEnv


def add_parser(sub: Any) -> None:
    p = sub.add_parser("eval", help="run a policy on an env: N tasks x K samples, JSONL records")
    p.add_argument("env_id", help="e.g. MT/FrozenLake-v0 (or module:Namespace/Name-v0)")
    add_env_args(p)
    p.add_argument(
        "--policy",
        default="random",
        help="random | expert | noisy-expert[:eps] | package.module:attr | "
        "hf:<folder or smollm2>[,gguf=F][,temperature=..] | vllm:<model> | "
        "openai:<base_url>,model=<id> (docs/analyses.md)",
    )
    p.add_argument(
        "--tasks",
        default=None,
        help="N (the first N task ids) or comma-separated task ids (default: all)",
    )
    p.add_argument("--samples", "-k", type=SAMPLES, default=8, help="K trajectories per task")
    p.add_argument("--max-turns", "-t", type=MAX_TURNS, default=8, help="T_max, the turn budget")
    p.add_argument("--budget-mode", choices=("hidden", "announced"), default="hidden")
    p.add_argument(
        "--turn-grid",
        default=None,
        help="announced mode: comma-separated budgets to run (default 1..T_max)",
    )
    p.add_argument(
        "--error-after",
        type=ERROR_AFTER,
        default=None,
        metavar="k",
        help="inject an error after k expert steps (ErrorInjection)",
    )
    p.add_argument("--seed", type=SEED, default=0, help="run seed (non-negative)")
    p.add_argument(
        "--out", default=None, help="record file (default runs/<env>_<policy>_....jsonl)"
    )
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue an existing --out of the same run (default on)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument(
        "--in-flight",
        type=IN_FLIGHT,
        default=64,
        help="episodes in flight = env instances = largest policy batch",
    )
    p.add_argument(
        "--workers",
        type=WORKERS,
        default=1,
        help="threads stepping envs (raise for slow envs: sandboxes, databases)",
    )
    p.add_argument(
        "--env-url",
        default=None,
        metavar="URL",
        help="run against an env served by `multiturn-envs serve` at URL (token: "
        "$MTE_SERVE_TOKEN); the server's env arguments apply, not --env-arg",
    )
    add_executor_args(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=run)


def default_out(env_id: str, policy: str, samples: int, max_turns: int, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{env_id}_{policy}").strip("_")
    return str(Path("runs") / f"{slug}_K{samples}_T{max_turns}_s{seed}.jsonl")


def served_env_factory(url: str, env_id: str) -> Callable[[], TextEnv]:
    """Sessions of the env served at ``url`` (checked to be ``env_id``)."""
    try:
        from multiturn_envs.server.remote_env import remote_env_factory
        from multiturn_envs.server.serve import TOKEN_ENV
    except ImportError as exc:
        raise UsageError(f"--env-url needs the [server] extra: {exc}") from None
    return remote_env_factory(url, token=os.environ.get(TOKEN_ENV), expect_env_id=env_id)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.errors import RecordFileError
    from multiturn_envs.harness import EvalConfig, run_eval

    env_kwargs = parse_env_args(args.env_arg)
    for reserved in ("max_turns", "budget_mode"):
        if reserved in env_kwargs:
            raise UsageError(f"set {reserved} with --{reserved.replace('_', '-')}, not --env-arg")
    make_env = None
    if args.env_url is not None:
        if env_kwargs:
            raise UsageError("--env-arg and --env-url: the served env's arguments are the server's")
        make_env = served_env_factory(args.env_url, args.env_id)
        probe = make_env()
        try:
            tasks = resolve_tasks(probe.task_ids(), args.tasks)
        finally:
            probe.close()
    else:
        tasks = env_tasks(args.env_id, env_kwargs, args.tasks)
    policy = load_policy(args.policy)
    with user_errors():
        config = EvalConfig(
            env_id=args.env_id,
            policy=args.policy,
            tasks=tasks,
            samples=args.samples,
            max_turns=args.max_turns,
            budget_mode=args.budget_mode,
            turn_grid=int_list(args.turn_grid, "--turn-grid") if args.turn_grid else None,
            error_after=args.error_after,
            seed=args.seed,
            env_kwargs=env_kwargs,
        )
    out = args.out or default_out(args.env_id, args.policy, args.samples, args.max_turns, args.seed)
    executor = executor_of(args, args.policy)
    try:
        summary = run_eval(
            config,
            policy,
            out,
            in_flight=args.in_flight,
            workers=args.workers,
            resume=args.resume,
            overwrite=args.overwrite,
            progress=False if args.quiet else None,
            make_env=make_env,
            executor=executor,
        )
    except RecordFileError as exc:
        raise UsageError(str(exc)) from None
    if not args.quiet:
        note = (
            f", repaired a torn last line ({summary.repaired_bytes} bytes)"
            if summary.repaired_bytes
            else ""
        )
        print(
            f"{summary.path}: {summary.written} trajectories written, {summary.skipped} already "
            f"there (of {summary.total}); {summary.steps} steps in {summary.policy_calls} "
            f"policy calls, {summary.wall_s:.1f} s{note}",
            file=sys.stderr,
        )
    return 0
