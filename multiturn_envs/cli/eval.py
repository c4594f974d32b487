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
    IN_FLIGHT,
    TOKEN_LIMIT,
    TURN_LIST,
    WORKERS,
    UsageError,
    add_env_args,
    add_executor_args,
    add_flags,
    env_tasks,
    executor_of,
    load_policy,
    parse_env_args,
    reset_refusal,
    resolve_tasks,
    use_engines,
    user_errors,
)
from multiturn_envs.core import TextEnv


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="run a policy on an env: N tasks x K samples, JSONL records",
        description="""\
Run a policy on N tasks x K samples with a turn budget T and write one JSONL record per
trajectory. Hidden budget mode: one run gives all of Pass@(K,T); announced mode runs each T of
--turn-grid. On success it prints one summary line on stderr (written, already there, steps,
policy calls). The record format and the resume rules: docs/harness.md.""",
        epilog="""\
multiturn-envs eval MT/FrozenLake-v0 --policy noisy-expert:0.3 --tasks 10 --samples 16 \\
    --max-turns 8 --seed 0 --out runs/noisy.jsonl""",
    )
    p.add_argument("env_id", help="a registered id; module:Namespace/Name-v0 imports module first")
    add_env_args(p)
    p.add_argument(
        "--policy",
        default="random",
        help="random | expert | noisy-expert[:eps] | package.module:attr | "
        "hf:<folder or smollm2>[,gguf=F][,temperature=..] | vllm:<model> | "
        "openai:<base_url>,model=<id> (docs/analyses.md)",
    )
    add_flags(p, "--tasks", "--samples", "--max-turns")
    p.add_argument(
        "--budget-mode",
        choices=("hidden", "announced"),
        default="hidden",
        help="hidden: one run gives all of Pass@(K,T); announced: a run per T",
    )
    p.add_argument(
        "--turn-grid",
        default=None,
        type=TURN_LIST,
        help="announced mode: comma-separated budgets to run (default 1..T_max)",
    )
    add_flags(p, "--error-after", "--seed")
    p.add_argument(
        "--out",
        default=None,
        metavar="FILE.jsonl",
        help="the record file (default runs/<env>_<policy>_K<k>_T<t>_s<seed>.jsonl)",
    )
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue an existing --out of the same run (default on)",
    )
    add_flags(p, "--overwrite")
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
    p.add_argument(
        "--cache",
        default=None,
        metavar="FILE.sqlite",
        help="an LLM policy's response cache: calls made before are answered from it (off by "
        "default; docs/policies.md)",
    )
    p.add_argument(
        "--token-limit",
        type=TOKEN_LIMIT,
        default=None,
        metavar="N",
        help="end an episode once its turns used N tokens (prompt + completion), truncated "
        "with reason token_limit (default: none)",
    )
    add_executor_args(p)
    add_flags(p, "--quiet")
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
    use_engines(args.engine)
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
            tasks = resolve_tasks(probe.task_ids(), args.tasks, reset_refusal(probe))
        finally:
            probe.close()
    else:
        tasks = env_tasks(args.env_id, env_kwargs, args.tasks)
    policy = load_policy(args.policy, cache=args.cache)
    with user_errors():
        config = EvalConfig(
            env_id=args.env_id,
            policy=args.policy,
            tasks=tasks,
            samples=args.samples,
            max_turns=args.max_turns,
            budget_mode=args.budget_mode,
            turn_grid=args.turn_grid,
            error_after=args.error_after,
            seed=args.seed,
            env_kwargs=env_kwargs,
            token_limit=args.token_limit,
        )
    out = args.out or default_out(args.env_id, args.policy, args.samples, args.max_turns, args.seed)
    executor = executor_of(args, args.policy, cache=args.cache)
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
        raise UsageError(f"{exc} (--resume, --overwrite, --out)") from None
    if not args.quiet:
        note = (
            f", repaired a torn last line ({summary.repaired_bytes} bytes)"
            if summary.repaired_bytes
            else ""
        )
        cache = getattr(policy, "cache", None)
        if cache is not None:
            note += f"; response cache: {cache.hits} hits, {cache.misses} misses"
        print(
            f"{summary.path}: {summary.written} trajectories written, {summary.skipped} already "
            f"there (of {summary.total}); {summary.steps} steps in {summary.policy_calls} "
            f"policy calls, {summary.wall_s:.1f} s{note}",
            file=sys.stderr,
        )
    return 0
