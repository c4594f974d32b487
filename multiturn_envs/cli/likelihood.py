"""``multiturn-envs nll`` and ``llr``: action NLL and cumulative LLR of record files' actions.

docs/analyses.md defines every number they print.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from multiturn_envs.cli.common import add_ci_args, add_flags, user_errors, write_json

_MODEL_HELP = (
    "scoring model: hf:<folder or smollm2>[,gguf=F][,dtype=..] | vllm:<model> | "
    "openai:<base_url>,model=<id>,tokenizer=<folder>"
)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "nll",
        help="mean action NLL of record files' actions under a model",
        description="Mean negative log-likelihood of every recorded action under a scoring "
        "model,\nper run and by success (docs/analyses.md).",
        epilog="multiturn-envs nll a.jsonl b.jsonl --scoring-model hf:smollm2",
    )
    p.add_argument("files", nargs="+", help="record files (.jsonl), one per policy")
    p.add_argument("--scoring-model", required=True, help=_MODEL_HELP)
    add_flags(p, "--system-prompt")
    add_ci_args(p)
    add_flags(p, "--json-out", "--overwrite")
    p.set_defaults(func=run_nll)

    p = sub.add_parser(
        "llr",
        help="cumulative LLR log p_A - log p_B per trajectory, by success",
        description="Cumulative log-likelihood ratio log p_A - log p_B of each trajectory's "
        "actions,\nsplit by success (docs/analyses.md).",
        epilog="multiturn-envs llr a.jsonl --model-a hf:RL --model-b hf:BASE",
    )
    p.add_argument("files", nargs="+", help="record files (.jsonl)")
    p.add_argument(
        "--model-a", required=True, help="the numerator scoring model, e.g. the RL one (a spec)"
    )
    p.add_argument(
        "--model-b", required=True, help="the reference scoring model, e.g. the base one"
    )
    add_flags(p, "--system-prompt")
    add_ci_args(p)
    add_flags(p, "--json-out", "--overwrite")
    p.set_defaults(func=run_llr)


def _identity(model: Any) -> dict[str, str]:
    return {"name": model.name, "engine": model.engine, "dtype": model.dtype}


def _per_run(summaries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each run's per-group summaries as JSON-ready dicts."""
    return [{group: s.to_dict() for group, s in per.items()} for per in summaries]


def run_nll(args: argparse.Namespace) -> int:
    """Mean action NLL of each record file's actions under one scoring model."""
    from multiturn_envs.harness import action_nll, format_nll, read_run, run_label, score_run
    from multiturn_envs.policies import load_scoring_model

    with user_errors():
        runs = [read_run(f) for f in args.files]
        model = load_scoring_model(args.scoring_model, args.system_prompt)
        ci = (args.bootstrap, args.alpha, args.bootstrap_seed)
        summaries = [
            action_nll(score_run(model, run), run_label(run), model.name, *ci) for run in runs
        ]
    payload = {"model": _identity(model), "runs": _per_run(summaries)}
    text = format_nll(summaries, model, args.alpha, args.bootstrap)
    print(text + write_json(args.json_out, payload, args.overwrite))
    return 0


def run_llr(args: argparse.Namespace) -> int:
    """Cumulative LLR log p_A - log p_B of each trajectory, split by success."""
    from multiturn_envs.harness import format_llr, llr_pairs, read_run, run_label, trajectory_llr
    from multiturn_envs.policies import load_scoring_model

    with user_errors():
        runs = [read_run(f) for f in args.files]
        a = load_scoring_model(args.model_a, args.system_prompt)
        b = (
            a
            if args.model_b == args.model_a
            else load_scoring_model(args.model_b, args.system_prompt)
        )
        ci = (args.bootstrap, args.alpha, args.bootstrap_seed)
        summaries = [
            trajectory_llr(llr_pairs(a, b, run), run_label(run), a.name, b.name, *ci)
            for run in runs
        ]
    payload = {"model_a": _identity(a), "model_b": _identity(b), "runs": _per_run(summaries)}
    text = format_llr(summaries, a, b, args.alpha, args.bootstrap)
    print(text + write_json(args.json_out, payload, args.overwrite))
    return 0
