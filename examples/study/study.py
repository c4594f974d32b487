"""The study in miniature: SFT base, GRPO arms, held-out evaluation and the analysis battery.

    OMP_NUM_THREADS=1 python examples/study/study.py --out runs/study [--seed 0] [--jobs 2]

FrozenLake maps are split by *layout* (not by id: two ids can draw one map) into training and
held-out maps. The base is a tiny model warm-started by expert SFT (``warm_start="sft"``); each
arm of ``config.json`` trains from that base with ``multiturn_envs.rl.train`` (TRL's
``GRPOTrainer``): outcome reward at fixed T, outcome + process reward, GiGPO, BudgetMix. The
base and every arm are then evaluated by the harness on the held-out maps with a hidden budget
T_max, in the tool layout they were trained in, and the report (``<out>/report.md``, PNGs beside
it) holds: Pass@(K,T) surfaces and the gap with paired CIs (``multiturn-envs report``'s code),
the headline Pass@(1,T_max) difference best arm - base with its paired 95% CI over maps,
same-state comparison on normal and injected-error states, error-state continuation, action
NLL and cumulative LLR split by success, and training dynamics over the best arm's checkpoints.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import gymnasium as gym
import numpy as np

import multiturn_envs  # noqa: F401
from multiturn_envs.envs.frozenlake.maps import random_map, random_task_id
from multiturn_envs.rl.config import TrainConfig

# the TrainConfig fields the SFT base depends on (the rest only shape the GRPO arms)
START_FIELDS = frozenset(
    {"env_id", "env_kwargs", "train_tasks", "model", "tiny", "chat_template", "warm_start"}
    | {"max_turns", "budget_mix", "seed", "threads", "sft_episodes", "sft_error_share"}
    | {"sft_steps", "sft_batch_size", "sft_learning_rate", "sft_closing"}
)


def _same_config(saved: Path, want: dict[str, Any]) -> bool:
    """Whether a stage's folder was made under ``want`` (JSON round trip: lists, not tuples)."""
    if not saved.exists():
        return False
    return bool(json.loads(saved.read_text()) == json.loads(json.dumps(want)))


def split_maps(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Training and held-out task ids whose map layouts never coincide."""
    size, p = config["map_size"], config["map_p"]
    seen: dict[tuple[str, ...], str] = {}
    for n in range(5000):
        desc = random_map(size, p, n)
        seen.setdefault(desc, random_task_id(size, p, n))
        if len(seen) >= config["train_maps"] + config["eval_maps"]:
            break
    ids = list(seen.values())
    rng = np.random.default_rng(12345)  # the split is fixed across study seeds
    order = [ids[int(i)] for i in rng.permutation(len(ids))]
    n_eval = min(config["eval_maps"], len(order) // 2)
    return order[n_eval:], order[:n_eval]


def tool_policy(folder: Path, base: TrainConfig, name: str, ev: dict[str, Any]) -> Any:
    """The model at ``folder`` as a harness policy, in the tool layout it was trained in."""
    from multiturn_envs.rl.evaluate import tool_layout_policy

    return tool_layout_policy(
        folder, base, name=name, temperature=ev["temperature"], max_tokens=ev["max_tokens"]
    )


def evaluate(
    policy: Any, tasks: list[str], config: dict[str, Any], base: TrainConfig, path: Path, **kw: Any
) -> Path:
    from multiturn_envs.harness import EvalConfig, run_eval

    run = EvalConfig(
        env_id=base.env_id,
        policy=policy.name,
        tasks=tasks,
        samples=kw.pop("samples", config["eval"]["samples"]),
        max_turns=config["t_max"],
        seed=config["seed"],
        env_kwargs=dict(base.env_kwargs),
        **kw,
    )
    run_eval(run, policy, str(path), overwrite=True, progress=False)
    return path


def pass1_per_task(path: Path) -> dict[str, float]:
    from multiturn_envs.harness import read_run

    per: dict[str, list[float]] = {}
    for r in read_run(path).records:
        per.setdefault(r["task_id"], []).append(float(bool(r["success"])))
    return {t: float(np.mean(v)) for t, v in per.items()}


def run_study(
    config: dict[str, Any], out: Path, log: Callable[[str], None], *, jobs: int = 1
) -> dict[str, Any]:
    """Run every stage not already in ``out``; ``jobs`` arms train side by side."""
    from multiturn_envs.harness import (
        action_nll,
        continuation_difference,
        error_state_continuation,
        main_report,
        pair_llr,
        paired_bootstrap_ci,
        plot_dynamics,
        read_run,
        same_state_comparison,
        score_run,
        states_from_records,
        training_dynamics,
        trajectory_llr,
    )
    from multiturn_envs.harness.likelihood import format_llr, format_nll
    from multiturn_envs.rl.evaluate import tool_layout_scorer
    from multiturn_envs.rl.train import TrainResult, ran_with, start_model, train_many

    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    train_tasks, eval_tasks = split_maps(config)
    seed = int(config["seed"])
    base = TrainConfig.from_dict(
        {**config["base"], "train_tasks": train_tasks, "seed": seed, "max_turns": config["t_max"]}
    )

    def make_env() -> gym.Env[str, str]:
        return gym.make(
            base.env_id, disable_env_checker=True, max_turns=config["t_max"], **base.env_kwargs
        )

    ev = config["eval"]
    if base.max_turn_tokens and base.max_turn_tokens != ev["max_tokens"]:
        raise ValueError(
            f"base.max_turn_tokens {base.max_turn_tokens} != eval.max_tokens {ev['max_tokens']}:"
            " a model must be evaluated with the reply cap it trained under"
        )

    # a rerun reuses a stage whose folder was made under the same config, and redoes the rest
    t = time.perf_counter()
    base_dir = out / "base" / "model"
    start_config = {k: v for k, v in base.to_dict().items() if k in START_FIELDS}
    fresh: set[str] = set()  # models (re)made in this run: their old evaluations are stale
    if not _same_config(out / "base" / "start_config.json", start_config):
        shutil.rmtree(out / "base", ignore_errors=True)
        base_dir = start_model(base, out / "base")
        (out / "base" / "start_config.json").write_text(json.dumps(start_config, indent=2))
        fresh.add("base")
    times["sft_base_s"] = time.perf_counter() - t
    log(f"base ready in {times['sft_base_s']:.0f} s")
    arms: dict[str, TrainConfig] = {
        name: TrainConfig.from_dict(
            {**base.to_dict(), **overrides, "output_dir": str(out / "arms" / name)}
        )
        for name, overrides in config["arms"].items()
    }
    models: dict[str, Path] = {"base": base_dir}
    train_logs: dict[str, list[dict[str, float]]] = {}
    for name, arm in arms.items():
        folder = Path(arm.output_dir)
        if "base" not in fresh and (folder / "final" / "config.json").exists() and ran_with(arm):
            lines = (folder / "train_log.jsonl").read_text().splitlines()
            models[name], train_logs[name] = folder / "final", [json.loads(x) for x in lines if x]
            log(f"arm {name}: reused")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            fresh.add(name)

    def trained(name: str, result: TrainResult) -> None:
        models[name], train_logs[name] = result.model_dir, result.log
        times[f"train_{name}_s"] = result.seconds
        log(f"arm {name}: {result.seconds:.0f} s, last reward {result.log[-1]['reward']:.3f}")

    t = time.perf_counter()
    train_many({n: arms[n] for n in arms if n in fresh}, base_dir, jobs=jobs, done=trained)
    times["train_arms_wall_s"] = time.perf_counter() - t
    models = {"base": base_dir, **{n: models[n] for n in arms}}
    train_logs = {n: train_logs[n] for n in arms}
    files: dict[str, Path] = {}
    for name, folder in models.items():
        t = time.perf_counter()
        path = out / f"eval-{name}.jsonl"
        want = len(eval_tasks) * ev["samples"]
        if (
            name not in fresh
            and path.exists()
            and sum('"trajectory"' in x for x in path.open()) == want
        ):
            files[name] = path
        else:
            policy = tool_policy(folder, base, name, ev)
            files[name] = evaluate(policy, eval_tasks, config, base, path)
        times[f"eval_{name}_s"] = time.perf_counter() - t
    log(
        "evaluated: "
        + ", ".join(
            f"{n} {np.mean(list(pass1_per_task(p).values())):.3f}" for n, p in files.items()
        )
    )

    # the headline: Pass@(1,T_max) of each arm vs the base, paired over held-out maps
    n_boot = int(config["n_boot"])
    base_p1 = pass1_per_task(files["base"])
    headline: dict[str, Any] = {}
    for name in config["arms"]:
        arm_p1 = pass1_per_task(files[name])
        common = sorted(set(base_p1) & set(arm_p1))
        ci = paired_bootstrap_ci(
            [arm_p1[k] for k in common], [base_p1[k] for k in common], n_boot=n_boot, seed=seed
        )
        headline[name] = {"arm": ci.a.to_dict(), "base": ci.b.to_dict(), "diff": ci.diff.to_dict()}
    best = max(config["arms"], key=lambda n: headline[n]["diff"]["estimate"])

    t = time.perf_counter()
    order = ["base", *config["arms"]]
    surfaces = main_report(
        [str(files[n]) for n in order], n_boot=n_boot, seed=seed, plots=False
    )  # five heatmaps side by side are unreadable: tables here, plots for best vs base
    best_vs_base = main_report(
        [str(files[best]), str(files["base"])], out_dir=str(out), n_boot=n_boot, seed=seed
    )
    times["report_s"] = time.perf_counter() - t

    # same-state comparison, normal states (visited by the base) and injected-error states
    t = time.perf_counter()
    pol_best = tool_policy(models[best], base, best, ev)
    pol_base = tool_policy(base_dir, base, "base", ev)
    cap = int(config["same_state_max_states"])
    normal_states = states_from_records(make_env, read_run(files["base"]).records)[:cap]
    same_normal = same_state_comparison(
        make_env,
        normal_states,
        pol_best,
        pol_base,
        n_actions=config["same_state_actions"],
        seed=seed,
        n_boot=n_boot,
    )
    cont = config["continuation"]
    err_file = evaluate(
        pol_base,
        eval_tasks,
        config,
        base,
        out / "eval-base-errors.jsonl",
        samples=2,
        error_after=cont["error_after"],
    )
    error_states = states_from_records(make_env, read_run(err_file).records, turns=[0])[:cap]
    same_error = same_state_comparison(
        make_env,
        error_states,
        pol_best,
        pol_base,
        n_actions=config["same_state_actions"],
        seed=seed,
        n_boot=n_boot,
    )
    times["same_state_s"] = time.perf_counter() - t

    t = time.perf_counter()
    conts = [
        error_state_continuation(
            make_env,
            p,
            eval_tasks,
            cont["error_after"],
            cont["samples"],
            config["t_max"],
            seed=seed,
            n_boot=n_boot,
        )
        for p in (pol_best, pol_base)
    ]
    cont_diff = continuation_difference(conts[0], conts[1], seed=seed)
    times["continuation_s"] = time.perf_counter() - t

    t = time.perf_counter()
    likelihood: list[str] = []
    try:
        scorer_best = tool_layout_scorer(models[best], base, best)
        scorer_base = tool_layout_scorer(base_dir, base, "base")
        for label, path in (
            (f"trajectories of {best}", files[best]),
            ("trajectories of base", files["base"]),
        ):
            run = read_run(path)
            s_best, s_base = (
                score_run(scorer_best, run, make_env),
                score_run(scorer_base, run, make_env),
            )
            nll_best = action_nll(s_best, label, best, n_boot=n_boot)
            nll_base = action_nll(s_base, label, "base", n_boot=n_boot)
            llr = trajectory_llr(pair_llr(s_best, s_base), label, best, "base", n_boot=n_boot)
            likelihood += [
                format_nll([nll_best], scorer_best, 0.05, n_boot),
                format_nll([nll_base], scorer_base, 0.05, n_boot),
                format_llr([llr], scorer_best, scorer_base, 0.05, n_boot),
            ]
    except ValueError as exc:  # the scorer cannot render this layout: say so in the report
        likelihood = [f"not computed: {exc}"]
    times["likelihood_s"] = time.perf_counter() - t

    # training dynamics of the best arm: its checkpoints evaluated on the held-out maps
    t = time.perf_counter()
    arm_dir = out / "arms" / best
    points = [("step 0", 0, files["base"])]
    for ckpt in sorted(arm_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])):
        step = int(ckpt.name.split("-")[-1])
        pol = tool_policy(ckpt, base, f"{best}@{step}", ev)
        points.append(
            (
                f"step {step}",
                step,
                evaluate(
                    pol, eval_tasks, config, base, out / f"dyn-{best}-{step}.jsonl", samples=4
                ),
            )
        )
    dyn = training_dynamics(
        [read_run(p).records for _, _, p in points],
        [n for n, _, _ in points],
        steps=[s for _, s, _ in points],
        n_boot=n_boot,
        seed=seed,
    )
    dyn_png = plot_dynamics(dyn, out / "dynamics.png")
    times["dynamics_s"] = time.perf_counter() - t
    times["total_s"] = time.perf_counter() - t0

    summary = {
        "config": copy.deepcopy(config),
        "train_tasks": train_tasks,
        "eval_tasks": eval_tasks,
        "headline_pass1_tmax": headline,
        "best_arm": best,
        "same_state_normal": same_normal.to_dict(include_states=False),
        "same_state_error": same_error.to_dict(include_states=False),
        "continuation": {
            "best": conts[0].to_dict(False),
            "base": conts[1].to_dict(False),
            "diff": cont_diff.to_dict(),
        },
        "dynamics": dyn.to_dict(),
        "train_logs": train_logs,
        "timings_s": times,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    write_report(
        out,
        summary,
        surfaces,
        best_vs_base,
        same_normal.format(),
        same_error.format(),
        [c.format() for c in conts]
        + [f"success {best} - base (paired over maps)  {cont_diff.format()}"],
        likelihood,
        dyn.format(),
        dyn_png,
    )
    return summary


def _pct(d: dict[str, Any]) -> str:
    return f"{d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def write_report(
    out: Path,
    s: dict[str, Any],
    surfaces: str,
    best_vs_base: str,
    same_normal: str,
    same_error: str,
    continuation: list[str],
    likelihood: list[str],
    dynamics: str,
    dyn_png: Path,
) -> None:
    best = s["best_arm"]
    rows = "\n".join(
        f"| {name} | {h['arm']['estimate']:.3f} | {h['base']['estimate']:.3f} | {_pct(h['diff'])} |"
        for name, h in s["headline_pass1_tmax"].items()
    )
    pngs = sorted(p.name for p in out.glob("*.png"))
    times = "\n".join(f"| {k} | {v:.1f} |" for k, v in s["timings_s"].items())
    logs = "\n".join(
        f"| {name} | "
        + " ".join(f"{e['reward']:.2f}" for e in log)
        + " | "
        + " ".join(f"{e['env/step_score']:.2f}" for e in log)
        + " |"
        for name, log in s["train_logs"].items()
    )
    text = f"""# The study in miniature (FrozenLake, seed {s["config"]["seed"]})

Training maps: {len(s["train_tasks"])}; held-out maps: {len(s["eval_tasks"])} (layouts disjoint).
Hidden budget T_max = {s["config"]["t_max"]}; {s["config"]["eval"]["samples"]} samples per map.

## Headline: Pass@(1,T_max) on held-out maps, arm - base (paired 95% CI over maps)

| arm | arm | base | difference [95% CI] |
|---|---|---|---|
{rows}

Best arm: **{best}**.

## Pass@(K,T) surfaces (base first; differences are base - arm)

```
{surfaces}
```

## Best arm vs base

```
{best_vs_base}
```

## Same-state comparison ({best} = A vs base = B), states the base visits

```
{same_normal}
```

## Same-state comparison on injected-error states

```
{same_error}
```

## Error-state continuation

```
{chr(10).join(continuation)}
```

## Action NLL and cumulative LLR ({best} vs base), split by success

```
{chr(10).join(likelihood)}
```

## Training dynamics ({best}, held-out maps, checkpoints)

```
{dynamics}
```

![dynamics]({dyn_png.name})

## Training logs (reward per GRPO step | mean step score per step)

| arm | trajectory reward | step score |
|---|---|---|
{logs}

## Plots

{chr(10).join(f"![{p}]({p})" for p in pngs if p != dyn_png.name)}

## Timings (s)

| stage | seconds |
|---|---|
{times}
"""
    (out / "report.md").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(Path(__file__).with_name("config.json")))
    parser.add_argument("--out", default="runs/study")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="arms trained side by side"
    )
    args = parser.parse_args()
    config = json.loads(Path(args.config).read_text())
    if args.seed is not None:
        config["seed"] = args.seed
    import sys

    import torch

    torch.manual_seed(int(config["seed"]))
    summary = run_study(
        config,
        Path(args.out),
        lambda text: print(text, file=sys.stderr, flush=True),
        jobs=args.jobs,
    )
    for name, h in summary["headline_pass1_tmax"].items():
        print(f"{name:>12}: Pass@(1,T_max) arm - base = {_pct(h['diff'])}")
    print(
        f"best arm: {summary['best_arm']}; total {summary['timings_s']['total_s']:.0f} s; "
        f"report: {Path(args.out) / 'report.md'}"
    )


if __name__ == "__main__":
    main()
