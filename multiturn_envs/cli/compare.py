"""``multiturn-envs compare``: same-state comparison or error-state continuation of two policies.

``same-state``: states from the trajectories in ``--states-from`` (restricted to ``--tasks``),
or, without a record file, every state that policy A visits in ``--samples`` hidden-budget
episodes per task (our default: A is the reference whose states are probed); each policy then
samples ``--actions`` actions per state, scored by the env's oracle. ``continuation``: both
policies from the same injected error states, with the paired difference over tasks. The
episodes compare runs go through ``--executor``; the oracle scoring runs here.
"""

from __future__ import annotations

import argparse
from typing import Any

from multiturn_envs.cli.common import (
    ACTIONS,
    UsageError,
    add_env_args,
    add_executor_args,
    add_flags,
    env_factory,
    env_tasks,
    executor_of,
    load_policy,
    parse_env_args,
    user_errors,
    write_json,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="same-state comparison / error-state continuation",
        description="""\
Runs multiturn_envs.harness.same_state_comparison or error_state_continuation
(docs/metrics.md). same-state samples --actions actions per policy from each state (states
from --states-from RECORDS.jsonl, else the states policy A visits in --samples episodes per
task) and reports win/tie/loss by the oracle; continuation runs both policies from the same
injected error states (--error-after k) and reports their success and the paired difference.
--seed seeds the episodes and the paired bootstrap.""",
        epilog="""\
multiturn-envs compare MT/FrozenLake-v0 --policy-a expert --policy-b random --tasks 10
multiturn-envs compare MT/FrozenLake-v0 --mode continuation --policy-a A --policy-b B \\
    --error-after 1""",
    )
    p.add_argument("env_id", help="a registered id; module:Namespace/Name-v0 imports module first")
    p.add_argument(
        "--mode",
        choices=("same-state", "continuation"),
        default="same-state",
        help="same-state: N actions per policy from one snapshot, oracle-scored; "
        "continuation: success from injected error states",
    )
    p.add_argument("--policy-a", required=True, help="the reference policy (spec as in eval)")
    p.add_argument("--policy-b", required=True, help="the policy compared with A")
    add_env_args(p)
    add_flags(p, "--tasks")
    p.add_argument(
        "--states-from",
        default=None,
        metavar="RECORDS.jsonl",
        help="take states from the trajectories of a record file",
    )
    p.add_argument("--actions", type=ACTIONS, default=16, help="actions per policy and state")
    # --samples: A's episodes per task (same-state) or continuations per task (continuation);
    # --error-after: continuation needs it; --seed also seeds the paired bootstrap
    add_flags(p, "--samples", "--max-turns", "--error-after", "--seed", "--json-out", "--overwrite")
    add_executor_args(p)  # the episodes compare runs (states, continuations)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from multiturn_envs.harness import (
        EvalConfig,
        continuation_difference,
        error_state_continuation,
        eval_records,
        in_task_order,
        read_run,
        same_state_comparison,
        states_from_records,
    )

    if args.mode == "continuation" and args.error_after is None:
        raise UsageError("--mode continuation needs --error-after k (the expert steps before it)")
    env_kwargs = parse_env_args(args.env_arg)
    tasks = env_tasks(args.env_id, env_kwargs, args.tasks)
    policy_a, policy_b = load_policy(args.policy_a), load_policy(args.policy_b)
    executors = (executor_of(args, args.policy_a), executor_of(args, args.policy_b))
    make_env = env_factory(args.env_id, env_kwargs)
    payload: dict[str, Any]
    with user_errors(TypeError, missing="no such record file"):
        if args.mode == "same-state":
            if args.states_from is not None:
                wanted = set(tasks)
                records = [r for r in read_run(args.states_from).records if r["task_id"] in wanted]
                if not records:
                    raise ValueError(f"{args.states_from} holds no trajectory of the chosen tasks")
                source = f"trajectories of {args.states_from}"
            else:
                config = EvalConfig(
                    env_id=args.env_id,
                    policy=policy_a.name,
                    tasks=list(tasks),
                    samples=args.samples,
                    max_turns=args.max_turns,
                    seed=args.seed,
                    env_kwargs=dict(env_kwargs),
                )
                records = eval_records(
                    config, policy_a, progress=False, make_env=make_env, executor=executors[0]
                )
                source = f"states visited by {policy_a.name} ({args.samples} episodes per task)"
            records = in_task_order(records, tasks)  # each state's seeds follow its position
            states = states_from_records(make_env, records)
            result = same_state_comparison(
                make_env, states, policy_a, policy_b, n_actions=args.actions, seed=args.seed
            )
            text = f"{result.format()}\n  states: {source}"
            payload = result.to_dict()
        else:
            res = [
                error_state_continuation(
                    make_env,
                    p,
                    tasks,
                    args.error_after,
                    args.samples,
                    args.max_turns,
                    seed=args.seed,
                    executor=ex,
                )
                for p, ex in zip((policy_a, policy_b), executors)
            ]
            diff = continuation_difference(res[0], res[1], seed=args.seed)
            text = "\n".join(
                [
                    res[0].format(),
                    res[1].format(),
                    f"  success A - B (paired over tasks)  {diff.format()}",
                ]
            )
            payload = {"a": res[0].to_dict(), "b": res[1].to_dict(), "diff": diff.to_dict()}
    print(
        text
        + write_json(args.json_out, payload, args.overwrite).replace("\nwritten:", "\n  written:")
    )
    return 0
