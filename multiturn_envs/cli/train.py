"""``multiturn-envs train``: GRPO through TRL on an MT/* env, from a JSON config plus flags."""

from __future__ import annotations

import argparse
import json
from typing import Any

from multiturn_envs.cli.common import (
    STEP_WEIGHT,
    TRAIN_STEPS,
    TURN_LIST,
    add_flags,
    parse_env_args,
    use_engines,
    user_errors,
)
from multiturn_envs.rewards import reward_names
from multiturn_envs.rl.config import ADVANTAGES


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="GRPO through TRL: a reward (outcome, process, ...) x an advantage (GRPO, GiGPO)",
        description="""\
Train a model on an MT/* env with TRL's GRPOTrainer. Fields come from --config (JSON;
docs/training.md lists them), then the flags below, then --set key=value. --reward is a
registered reward (docs/rewards.md), --advantage the estimator: every reward combines with every
estimator. It prints one progress line per step on stderr and, at the end, one JSON line with
the model folder and the last step's reward, success and step score. A bad field is one line
and exit status 2.""",
        epilog="""\
multiturn-envs train --config run.json --advantage gigpo --save-steps 5 --output-dir runs/g
multiturn-envs train --config run.json --output-dir runs/g --resume-checkpoint""",
    )
    p.add_argument("--config", default=None, help="a JSON train config (TrainConfig fields)")
    p.add_argument("--env", dest="env_id", default=None, help="env id, e.g. MT/FrozenLake-v0")
    add_flags(p, "--env-arg", "--engine")
    p.add_argument("--train-tasks", default=None, help="comma-separated training task ids")
    p.add_argument("--model", default=None, help="'tiny', 'smollm2' or a local HF folder")
    p.add_argument(
        "--warm-start",
        choices=("none", "format", "sft"),
        default=None,
        help="what the model learns before GRPO (docs/training.md)",
    )
    p.add_argument(
        "--reward",
        default=None,
        help=f"a registered reward, one of {', '.join(reward_names())} (docs/rewards.md)",
    )
    p.add_argument("--step-weight", type=STEP_WEIGHT, default=None, help="process reward weight")
    p.add_argument(
        "--advantage",
        default=None,
        help=f"the advantage estimator, one of {', '.join(ADVANTAGES)} (any reward works with any)",
    )
    add_flags(p, "--max-turns", overlay=True)
    p.add_argument(
        "--budget-mix",
        type=TURN_LIST,
        default=None,
        help="comma-separated budgets (BudgetMix), e.g. 2,4,6",
    )
    p.add_argument("--steps", type=TRAIN_STEPS, default=None, help="GRPO steps")
    p.add_argument("--output-dir", default=None, help="the run's folder (checkpoints, log)")
    p.add_argument("--save-steps", type=TRAIN_STEPS, default=None, help="checkpoint every N steps")
    add_flags(p, "--seed", overlay=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any field")
    p.add_argument(
        "--resume-checkpoint",
        action="store_true",
        help="continue from the latest checkpoint of --output-dir",
    )
    add_flags(p, "--quiet")
    p.set_defaults(func=run)


def config_of(args: argparse.Namespace) -> Any:
    """The :class:`~multiturn_envs.rl.config.TrainConfig` the arguments describe."""
    from multiturn_envs.rl.config import TrainConfig, with_weight

    data: dict[str, Any] = TrainConfig.from_file(args.config).to_dict() if args.config else {}
    for name in ("env_id", "model", "reward", "advantage", "max_turns", "steps"):
        if getattr(args, name) is not None:
            data[name] = getattr(args, name)
    if args.step_weight is not None:
        data = with_weight(data, args.step_weight)
    for name in ("output_dir", "save_steps", "seed"):
        if getattr(args, name) is not None:
            data[name] = getattr(args, name)
    if args.warm_start is not None:
        data["warm_start"] = args.warm_start
    use_engines(args.engine)
    if args.env_arg:
        data["env_kwargs"] = {**data.get("env_kwargs", {}), **parse_env_args(args.env_arg)}
    if args.train_tasks:
        data["train_tasks"] = [t for t in args.train_tasks.split(",") if t]
    if args.budget_mix:
        data["budget_mix"] = args.budget_mix
    return TrainConfig.from_dict(data).updated(args.set)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.rl.checkpoints import check_output_dir, resume_checkpoint
    from multiturn_envs.rl.training import train

    with user_errors():
        config = config_of(args)
        resume_checkpoint(config, args.resume_checkpoint)
        check_output_dir(config)
    result = train(config, resume=args.resume_checkpoint, progress=not args.quiet)
    last = result.log[-1] if result.log else {}
    summary = {
        "model": str(result.model_dir),
        "steps": len(result.log),
        "seconds": round(result.seconds, 1),
        "last_reward": last.get("reward"),
        "last_success": last.get("env/success"),
        "last_step_score": last.get("env/step_score"),
    }
    print(json.dumps(summary))
    return 0
