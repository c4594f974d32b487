"""The study in miniature: SFT base, GRPO arms, held-out evaluation and the analysis battery.

    OMP_NUM_THREADS=1 python examples/study/study.py --out runs/study/seed-0 [--seed 0]
        [--arms outcome-T6 | all | outcome-T6,gigpo] [--threads 1] [--jobs 2]

One seed's run. FrozenLake maps are split by *layout* (not by id: two ids can draw one map) into
training and held-out maps. The base is a tiny model warm-started by expert SFT
(``warm_start="sft"``); each arm of ``config.json`` that runs (``default_arms``, or ``--arms``)
trains from that base with ``multiturn_envs.rl.training`` (TRL's ``GRPOTrainer``): outcome reward
at fixed T (the paper's GRPO, the pre-registered RL arm ``headline.arm``), and optionally
outcome + process reward, GiGPO, BudgetMix. The base and every arm are then evaluated by the
harness on the held-out maps with a hidden budget T_max, in the tool layout they were trained
in, and the report (``<out>/report.md``, PNGs beside it) holds: the run's fingerprint (what must
match for two runs to give the same digits), Pass@(K,T) surfaces and the gap with paired CIs
(``multiturn-envs report``'s code), Pass@(1,T_max) of every arm - base with its paired 95% CI
over maps, same-state comparison on normal and injected-error states, error-state continuation,
action NLL and cumulative LLR split by success, and training dynamics over the RL arm's
checkpoints. ``summary.json`` keeps every figure and the per-map and per-state values that
``spread.py`` pools over seeds: one seed is one draw of a chaotic training run (another
machine's floating-point path moves it by several points), so the study's conclusion is the
pooled one (``spread.py``), never one seed's.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np

import multiturn_envs  # noqa: F401
from multiturn_envs.envs.frozenlake.maps import random_map, random_task_id
from multiturn_envs.episode import EnvMaker
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.rl.fingerprint import run_fingerprint
from multiturn_envs.rl.run_view import RunView

# the TrainConfig fields the SFT base depends on (the rest only shape the GRPO arms)
START_FIELDS = frozenset(
    {"env_id", "env_kwargs", "train_tasks", "model", "tiny", "chat_template", "warm_start"}
    | {"max_turns", "budget_mix", "seed", "threads", "sft_episodes", "sft_error_share"}
    | {"sft_steps", "sft_batch_size", "sft_learning_rate", "sft_closing", "sft_frame_weight"}
    | {"sft_trl"}
)


def _own_json(path: Path) -> Any:
    """One of the study's bookkeeping files in its folder (at most 1 MiB), or ``None`` when it
    is missing or unreadable (a run cut while writing it, a hand edit): the stage it describes
    is then redone, never a traceback on every rerun."""
    from multiturn_envs.errors import UntrustedInputError
    from multiturn_envs.untrusted import load_json

    try:
        return load_json(path, max_bytes=1 << 20)
    except (OSError, UntrustedInputError, ValueError):
        return None


def _same_config(saved: Path, want: dict[str, Any]) -> bool:
    """Whether a stage's folder was made under ``want`` (JSON round trip: lists, not tuples)."""
    return bool(_own_json(saved) == json.loads(json.dumps(want)))


def choose_arms(config: dict[str, Any], arms: str | None = None) -> dict[str, Any]:
    """The config of one run: ``arms`` is ``None`` (the config's ``default_arms``), ``"all"``
    or a comma-separated list of arm names; the result's ``arms`` holds only those that run
    (the pre-registered RL arm always among them) and has no ``default_arms``."""
    known = list(config["arms"])
    if arms is None:
        names = list(config.get("default_arms", known))
    elif arms == "all":
        names = known
    else:
        names = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in names if a not in known]
    if unknown or not names:
        raise ValueError(f"arms {unknown or names!r}: the config's arms are {known}")
    rl = config["headline"]["arm"]
    if rl not in names:
        raise ValueError(f"the pre-registered RL arm {rl!r} must run (arms: {names})")
    chosen = {k: v for k, v in config.items() if k != "default_arms"}
    chosen["arms"] = {a: config["arms"][a] for a in known if a in names}
    return chosen


def pooling_config(config: dict[str, Any]) -> dict[str, Any]:
    """What must be equal for two seeds' runs to be pooled: the run's config without its seed
    and thread count (threads change the float path, not the design; the fingerprint shows
    them). Its digest is the fingerprint's ``config_digest``."""
    out = {k: v for k, v in copy.deepcopy(config).items() if k != "seed"}
    out["base"].pop("threads", None)
    return out


# the fingerprint fields that decide whether a folder's stages can be reused digit for digit
FLOAT_PATH_FIELDS = ("packages", "python", "cpu_capability", "threads", "float_path_env", "cpu")


def study_fingerprint(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`~multiturn_envs.rl.fingerprint.run_fingerprint` of this run plus the commit of the
    study's code (``unknown`` outside a git checkout)."""
    fingerprint = run_fingerprint(pooling_config(config), seed=int(config["seed"]))
    try:
        found = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        commit = found.stdout.strip() if found.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        commit = ""
    fingerprint["commit"] = commit or "unknown"
    return fingerprint


class NotAStudyFolder(ValueError):
    """``--out`` names a folder the study did not make: nothing in it is touched."""


def check_float_path(out: Path, fingerprint: dict[str, Any], log: Callable[[str], None]) -> None:
    """Stages a folder holds were made under one float path and package set: when this run's
    differ from those recorded in ``out/float_path.json`` (or none is recorded), the folder's
    base and everything built on it are removed, so that no record mixes two paths."""
    want = {k: fingerprint[k] for k in FLOAT_PATH_FIELDS}
    saved = out / "float_path.json"
    if saved.exists():
        had = _own_json(saved)
        if not isinstance(had, dict):
            changed = ["float_path.json unreadable"]
        elif {k: had.get(k) for k in FLOAT_PATH_FIELDS} == want:
            return
        else:
            changed = [k for k in FLOAT_PATH_FIELDS if had.get(k) != want[k]]
        log(f"{out}: made under another float path or package set ({', '.join(changed)}): rebuilt")
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        # every study folder records its float path first: without it, what is there is not
        # ours, and the stages would remove or replace it (``base/``, ``arms/``, ``eval-*``)
        raise NotAStudyFolder(
            f"{out} is not a folder this study made (it holds files and no float_path.json); "
            "give --out a new or empty folder"
        )
    if (out / "base").exists():
        shutil.rmtree(out / "base")
    out.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(want, indent=2))


def _clock() -> tuple[float, float]:
    """Wall seconds and CPU seconds so far (this process, plus finished child processes:
    the arms' workers), so a report can say what a stage costs on a quiet machine."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), time.process_time() + children.ru_utime + children.ru_stime


def read_config(path: str | Path) -> dict[str, Any]:
    """The study's config file, read within bounds (1 MiB, 64 levels, a regular file) and its
    fields checked (types and ranges, the message naming the field): a bad one is one line,
    before any work. The ``base`` and ``arms`` fields are TrainConfig fields, checked by it."""
    from multiturn_envs.untrusted import Fields, load_json

    where = str(path)
    config = load_json(path, max_bytes=1 << 20)
    fields = Fields(config, where=where)
    for name, low in (("map_size", 2), ("train_maps", 1), ("eval_maps", 1), ("t_max", 1)):
        fields.integer(name, default=None, minimum=low, maximum=100_000)
    fields.number("map_p", default=None, minimum=0.0, maximum=1.0, exclusive_minimum=True)
    for name in ("agreement_episodes", "same_state_actions", "same_state_max_states"):
        fields.integer(name, default=None, minimum=1, maximum=1_000_000)
    fields.integer("n_boot", default=None, minimum=0, maximum=100_000)
    fields.integer("seed", default=None, minimum=0, maximum=2**64 - 1)
    fields.table("base")
    arms = fields.table("arms")
    for name in arms:
        arms.table(name)
    ev = fields.table("eval")
    ev.integer("samples", default=None, minimum=1, maximum=100_000)
    ev.integer("max_tokens", default=None, minimum=1, maximum=10_000_000)
    ev.number("temperature", default=None, minimum=0.0, maximum=100.0)
    cont = fields.table("continuation")
    cont.integer("error_after", default=None, minimum=0, maximum=100_000)
    cont.integer("samples", default=None, minimum=1, maximum=100_000)
    return dict(config)


def split_maps(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Training and held-out task ids whose map layouts never coincide.

    The first ``train_maps + eval_maps`` distinct layouts (in seed order) are shuffled with a
    fixed generator and split; with ``train_extra_layouts`` every later solvable layout (found
    within 5,000 seeds) joins the training maps, so the held-out maps stay the same.
    """
    size, p = config["map_size"], config["map_p"]
    pool = config["train_maps"] + config["eval_maps"]
    extra = bool(config.get("train_extra_layouts", False))
    seen: dict[tuple[str, ...], str] = {}
    for n in range(5000):
        desc = random_map(size, p, n)
        seen.setdefault(desc, random_task_id(size, p, n))
        if len(seen) >= pool and not extra:
            break
    ids = list(seen.values())
    head, rest = ids[:pool], ids[pool:]
    rng = np.random.default_rng(12345)  # the split is fixed across study seeds
    order = [head[int(i)] for i in rng.permutation(len(head))]
    n_eval = min(config["eval_maps"], len(order) // 2)
    return order[n_eval:] + rest, order[:n_eval]


def tool_policy(folder: Path, view: RunView, name: str, ev: dict[str, Any]) -> Any:
    """The model at ``folder`` as a harness policy, in the tool layout it was trained in."""
    from multiturn_envs.rl.evaluate import tool_layout_policy

    return tool_layout_policy(
        folder,
        view.config,
        name=name,
        temperature=ev["temperature"],
        max_tokens=ev["max_tokens"],
        view=view,
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


CLAIM_FIGURES = {
    "gap": "RL - base at Pass@(k,T_max), pooled over seeds and held-out maps",
    "gap_k_contrast": "(RL - base at Pass@(k,T_max)) - (RL - base at Pass@(wide_k,T_max))",
    "same_state_better_normal": "share of normal states where RL's move beats the base's",
    "same_state_better_error": "share of injected-error states where RL's move beats the base's",
    "continuation_gain": "RL's success after an injected error - the base's",
}
"""The figures a pre-registered claim (config ``headline.claims``) can be about; ``spread.py``
computes each, pooled over seeds, and says whether its interval lies above ``above`` or below
``below``."""


def check_claim(claim: dict[str, Any], samples: int) -> None:
    """A clear error for a claim ``spread.py`` could not judge."""
    figure = claim.get("figure")
    if figure not in CLAIM_FIGURES:
        raise ValueError(f"claim figure {figure!r}: one of {sorted(CLAIM_FIGURES)}")
    if not isinstance(claim.get("statement"), str) or not claim["statement"]:
        raise ValueError(f"claim {figure!r} needs its statement (text)")
    if ("above" in claim) == ("below" in claim):
        raise ValueError(f"claim {claim['statement']!r}: give exactly one of above, below")
    from multiturn_envs.untrusted import Fields

    fields = Fields(claim, where="config", prefix=f"headline.claims ({figure}).")
    for bound in ("above", "below"):  # a rate or a difference of two: within [-2, 2], finite
        fields.number(bound, default=None, minimum=-2.0, maximum=2.0)
    for name in ("k", "wide_k"):
        fields.integer(name, default=None, minimum=1, maximum=100_000)
    ks = [int(claim.get("k", 1))] + ([int(claim["wide_k"])] if "wide_k" in claim else [])
    if figure == "gap_k_contrast" and "wide_k" not in claim:
        raise ValueError(f"claim {claim['statement']!r} compares k with wide_k: give wide_k")
    if figure.startswith("gap") and not all(1 <= k <= samples for k in ks):
        raise ValueError(f"claim {claim['statement']!r}: K {ks} must lie in 1..eval.samples")


def study_setup(config: dict[str, Any]) -> tuple[TrainConfig, list[str], list[str]]:
    """The base's TrainConfig (every arm starts from it) and the training and held-out maps."""
    train_tasks, eval_tasks = split_maps(config)
    base = TrainConfig.from_dict(
        {
            **config["base"],
            "train_tasks": train_tasks,
            "seed": int(config["seed"]),
            "max_turns": config["t_max"],
        }
    )
    ev = config["eval"]
    if base.max_turn_tokens and base.max_turn_tokens != ev["max_tokens"]:
        raise ValueError(
            f"base.max_turn_tokens {base.max_turn_tokens} != eval.max_tokens {ev['max_tokens']}:"
            " a model must be evaluated with the reply cap it trained under"
        )
    head = config["headline"]
    if head["arm"] not in config["arms"]:
        raise ValueError(f"headline.arm {head['arm']!r} is not an arm of the run")
    for claim in head["claims"]:
        check_claim(claim, int(ev["samples"]))
    return base, train_tasks, eval_tasks


def prepare_base(
    config: dict[str, Any],
    base: TrainConfig,
    out: Path,
    tasks: dict[str, list[str]],
    log: Callable[[str], None],
    view: RunView,
) -> tuple[Path, bool, dict[str, Any]]:
    """The SFT base in ``out/base`` (rebuilt unless made there under the same config), whether
    it was (re)built, and its agreement with the expert on the states of noisy-expert episodes
    of each group of ``tasks`` (:func:`~multiturn_envs.rl.evaluate.expert_agreement`; kept
    beside the model)."""
    from multiturn_envs.rl.evaluate import expert_agreement
    from multiturn_envs.rl.models import load_model, start_model
    from multiturn_envs.rl.warm_start import expert_examples

    base_dir = out / "base" / "model"
    start_config = {k: v for k, v in base.to_dict().items() if k in START_FIELDS}
    fresh = not _same_config(out / "base" / "start_config.json", start_config)
    if fresh:
        shutil.rmtree(out / "base", ignore_errors=True)
        base_dir = start_model(base, out / "base", log, view=view)
        (out / "base" / "start_config.json").write_text(json.dumps(start_config, indent=2))
    saved = out / "base" / "agreement.json"
    want = {"tasks": tasks, "episodes": config["agreement_episodes"]}
    found = None if fresh else _own_json(saved)
    kept = found.get("agreement") if isinstance(found, dict) and found.get("for") == want else None
    if isinstance(kept, dict):
        return base_dir, fresh, dict(kept)
    model, tokenizer = load_model(str(base_dir))
    agreement: dict[str, Any] = {}
    for group, group_tasks in tasks.items():
        examples = expert_examples(
            base.env_id,
            dict(base.env_kwargs),
            group_tasks,
            episodes=int(config["agreement_episodes"]),
            max_turns=config["t_max"],
            system=view.system_prompt,
            error_share=base.sft_error_share,
            seed=10_000 + base.seed,  # other episodes than the SFT data's
            closing=False,
        )
        found = expert_agreement(
            model,
            tokenizer,
            view.tool_functions(),
            examples,
            max_tokens=config["eval"]["max_tokens"],
        )
        agreement[group] = found.to_dict()
    saved.write_text(json.dumps({"for": want, "agreement": agreement}, indent=2))
    return base_dir, fresh, agreement


def run_base(config: dict[str, Any], out: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The base alone (``--base-only``): build it, measure whether it reads the map (expert
    agreement on training and held-out states) and its Pass@(1,T_max) on the held-out maps;
    write ``base_summary.json``. A full run reuses all of it."""
    from multiturn_envs.harness import bootstrap_ci

    base, train_tasks, eval_tasks = study_setup(config)
    fingerprint = study_fingerprint(config)
    check_float_path(out, fingerprint, log)
    t = time.perf_counter()
    tasks = {"training": train_tasks, "held_out": eval_tasks}
    view = RunView.of(base)
    base_dir, fresh, agreement = prepare_base(config, base, out, tasks, log, view)
    seconds = time.perf_counter() - t
    path = out / "eval-base.jsonl"
    if fresh or not _complete(path, len(eval_tasks) * config["eval"]["samples"]):
        evaluate(
            tool_policy(base_dir, view, "base", config["eval"]), eval_tasks, config, base, path
        )
    per_task = list(pass1_per_task(path).values())
    pass1 = bootstrap_ci(per_task, n_boot=int(config["n_boot"]), seed=base.seed)
    summary = {
        "seed": base.seed,
        "fingerprint": fingerprint,
        "agreement": agreement,
        "pass1_tmax": pass1.to_dict(),
        "base_seconds": seconds,
    }
    (out / "base_summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _complete(path: Path, want: int) -> bool:
    """Whether an evaluation's record file holds all ``want`` trajectories."""
    return path.exists() and sum('"trajectory"' in x for x in path.open()) == want


def run_study(
    config: dict[str, Any], out: Path, log: Callable[[str], None], *, jobs: int = 1
) -> dict[str, Any]:
    """Run every stage not already in ``out``; ``jobs`` arms train side by side.

    ``config`` is one run's (:func:`choose_arms`): every arm in it trains. The RL model of every
    analysis is the pre-registered ``headline.arm``, never the arm that did best on this seed
    (picking after the fact would bias the comparison).
    """
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
    from multiturn_envs.rl.checkpoints import ran_with
    from multiturn_envs.rl.evaluate import tool_layout_scorer
    from multiturn_envs.rl.training import TrainResult, train_many

    times: dict[str, float] = {}
    cpu: dict[str, float] = {}
    t0 = _clock()

    def timed(name: str, since: tuple[float, float]) -> None:
        now = _clock()
        times[name], cpu[name] = now[0] - since[0], now[1] - since[1]

    base, train_tasks, eval_tasks = study_setup(config)
    seed = base.seed
    ev = config["eval"]
    rl = str(config["headline"]["arm"])
    fingerprint = study_fingerprint(config)
    check_float_path(out, fingerprint, log)

    make_env = EnvMaker(base.env_id, {**base.env_kwargs, "max_turns": config["t_max"]})
    view = RunView.of(base)  # the layout every model of the study is evaluated in

    # a rerun reuses a stage whose folder was made under the same config, and redoes the rest
    t = _clock()
    tasks = {"training": train_tasks, "held_out": eval_tasks}
    base_dir, base_fresh, agreement = prepare_base(config, base, out, tasks, log, view)
    fresh: set[str] = {"base"} if base_fresh else set()  # (re)made: old evaluations are stale
    timed("sft_base_s", t)
    held = agreement["held_out"]
    log(
        f"base ready in {times['sft_base_s']:.0f} s; held-out p(expert move) greedy "
        f"{held['greedy']:.2f}, sampled {held['sampled']:.2f}"
    )
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

    t = _clock()
    train_many({n: arms[n] for n in arms if n in fresh}, base_dir, jobs=jobs, done=trained)
    timed("train_arms_wall_s", t)
    models = {"base": base_dir, **{n: models[n] for n in arms}}
    train_logs = {n: train_logs[n] for n in arms}
    files: dict[str, Path] = {}
    for name, folder in models.items():
        t = _clock()
        path = out / f"eval-{name}.jsonl"
        if name not in fresh and _complete(path, len(eval_tasks) * ev["samples"]):
            files[name] = path
        else:
            policy = tool_policy(folder, view, name, ev)
            files[name] = evaluate(policy, eval_tasks, config, base, path)
        timed(f"eval_{name}_s", t)
    log(
        "evaluated: "
        + ", ".join(
            f"{n} {np.mean(list(pass1_per_task(p).values())):.3f}" for n, p in files.items()
        )
    )

    # every arm's Pass@(1,T_max) vs the base's, paired over held-out maps
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

    t = _clock()
    surfaces, gaps = surfaces_and_gaps(files, list(config["arms"]), n_boot, seed)
    per_map = per_map_surfaces(files, eval_tasks)
    rl_vs_base = main_report(
        [str(files[rl]), str(files["base"])],
        out_dir=str(out),
        n_boot=n_boot,
        seed=seed,
        overwrite=True,  # this seed's own folder: a rerun replaces the plots it wrote
    )
    timed("report_s", t)

    # same-state comparison, normal states (visited by the base) and injected-error states
    t = _clock()
    pol_rl = tool_policy(models[rl], view, rl, ev)
    pol_base = tool_policy(base_dir, view, "base", ev)
    cap = int(config["same_state_max_states"])
    normal_states = states_from_records(make_env, read_run(files["base"]).records)[:cap]
    same_normal = same_state_comparison(
        make_env,
        normal_states,
        pol_rl,
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
        pol_rl,
        pol_base,
        n_actions=config["same_state_actions"],
        seed=seed,
        n_boot=n_boot,
    )
    timed("same_state_s", t)

    t = _clock()
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
        for p in (pol_rl, pol_base)
    ]
    cont_diff = continuation_difference(conts[0], conts[1], seed=seed)
    timed("continuation_s", t)

    t = _clock()
    likelihood: list[str] = []
    likelihood_figures: dict[str, Any] = {}
    try:
        scorer_rl = tool_layout_scorer(models[rl], base, rl, view)
        scorer_base = tool_layout_scorer(base_dir, base, "base", view)
        for who, path in ((rl, files[rl]), ("base", files["base"])):
            label = f"trajectories of {who}"
            run = read_run(path)
            s_rl, s_base = (
                score_run(scorer_rl, run, make_env),
                score_run(scorer_base, run, make_env),
            )
            nll_rl = action_nll(s_rl, label, rl, n_boot=n_boot)
            nll_base = action_nll(s_base, label, "base", n_boot=n_boot)
            llr = trajectory_llr(pair_llr(s_rl, s_base), label, rl, "base", n_boot=n_boot)
            likelihood_figures["rl" if who == rl else "base"] = {
                "nll_under_rl": {g: v.to_dict() for g, v in nll_rl.items()},
                "nll_under_base": {g: v.to_dict() for g, v in nll_base.items()},
                "llr_rl_minus_base": {g: v.to_dict() for g, v in llr.items()},
            }
            likelihood += [
                format_nll([nll_rl], scorer_rl, 0.05, n_boot),
                format_nll([nll_base], scorer_base, 0.05, n_boot),
                format_llr([llr], scorer_rl, scorer_base, 0.05, n_boot),
            ]
    except ValueError as exc:  # the scorer cannot render this layout: say so in the report
        likelihood = [f"not computed: {exc}"]
    timed("likelihood_s", t)

    # training dynamics of the RL arm: its checkpoints evaluated on the held-out maps
    t = _clock()
    arm_dir = out / "arms" / rl
    points = [("step 0", 0, files["base"])]
    for ckpt in sorted(arm_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])):
        step = int(ckpt.name.split("-")[-1])
        pol = tool_policy(ckpt, view, f"{rl}@{step}", ev)
        points.append(
            (
                f"step {step}",
                step,
                evaluate(
                    pol,
                    eval_tasks,
                    config,
                    base,
                    out / f"dyn-{rl}-{step}.jsonl",
                    samples=config["dynamics_samples"],
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
    dyn_png = plot_dynamics(dyn, out / "dynamics.png", overwrite=True)
    timed("dynamics_s", t)
    timed("total_s", t0)

    summary = {
        "config": copy.deepcopy(config),
        "fingerprint": fingerprint,
        "train_tasks": train_tasks,
        "eval_tasks": eval_tasks,
        "headline_pass1_tmax": headline,
        "rl_arm": rl,
        "base_agreement": agreement,
        "gap_surfaces": gaps,
        "per_map": per_map,
        "same_state_normal": same_normal.to_dict(include_states=False),
        "same_state_error": same_error.to_dict(include_states=False),
        "same_state_outcomes": {
            "normal": [state.outcome for state in same_normal.states],
            "error": [state.outcome for state in same_error.states],
        },
        "continuation": {
            "rl": conts[0].to_dict(False),
            "base": conts[1].to_dict(False),
            "diff": cont_diff.to_dict(),
        },
        "likelihood": likelihood_figures,
        "dynamics": dyn.to_dict(),
        "train_logs": train_logs,
        "timings_s": times,
        "cpu_s": cpu,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    write_report(
        out,
        summary,
        surfaces,
        rl_vs_base,
        same_normal.format(),
        same_error.format(),
        [c.format() for c in conts]
        + [f"success {rl} - base (paired over maps)  {cont_diff.format()}"],
        likelihood,
        dyn.format(),
        dyn_png,
    )
    return summary


def per_map_surfaces(files: dict[str, Path], tasks: list[str]) -> dict[str, Any]:
    """Every model's per-map Pass@(K,T) on the held-out maps, in ``tasks`` order: what
    ``spread.py`` pools over seeds (the maps are the same under every seed)."""
    from multiturn_envs.harness import read_run
    from multiturn_envs.harness.report import surface_of_run

    out: dict[str, Any] = {"tasks": list(tasks), "surfaces": {}}
    for name, path in files.items():
        surface = surface_of_run(read_run(path), tasks=tasks)
        if list(surface.task_ids) != list(tasks):
            raise ValueError(f"{path}: the held-out maps are not all evaluated")
        out["ks"], out["ts"] = surface.ks.tolist(), surface.ts.tolist()
        out["surfaces"][name] = surface.per_task.tolist()
    return out


def surfaces_and_gaps(
    files: dict[str, Path], arms: list[str], n_boot: int, seed: int
) -> tuple[str, dict[str, Any]]:
    """Every model's Pass@(K,T) table, then each arm's gap surface **arm - base** (the
    heatmaps' direction) with its paired 95% CI over maps; and the gaps as numbers."""
    from multiturn_envs.harness import read_run
    from multiturn_envs.harness.report import compare_runs, format_run, format_table, summarise

    runs = {name: read_run(path) for name, path in files.items()}
    parts = [
        format_run(summarise(run, None, None, n_boot, 0.05, seed), 0.05) for run in runs.values()
    ]
    gaps: dict[str, Any] = {}
    for arm in arms:
        sa, sb, paired = compare_runs(runs[arm], runs["base"], None, None, n_boot, 0.05, seed)
        diff = sa.values - sb.values
        low = None if paired is None else paired.diff.low
        high = None if paired is None else paired.diff.high
        title = f"Difference {arm} - base: {sa.n_tasks} common maps, paired 95% CI over maps"
        parts.append(format_table(sa.ks, sa.ts, diff, low, high, f"{title} (B={n_boot})"))
        gaps[arm] = {
            "ks": sa.ks.tolist(),
            "ts": sa.ts.tolist(),
            "diff": diff.tolist(),
            "low": None if low is None else np.asarray(low).tolist(),
            "high": None if high is None else np.asarray(high).tolist(),
        }
    return "\n\n".join(parts), gaps


# --------------------------------------------------------------------- paper vs miniature
Figure = tuple[str, float, str]  # (label, value, kind: "pct" | "gap" | "num")


def _gap_at(gap: dict[str, Any], k: int, t: int) -> float:
    return float(gap["diff"][gap["ks"].index(k)][gap["ts"].index(t)])


def paper_rows(s: dict[str, Any]) -> list[tuple[str, str, list[Figure]]]:
    """The review's findings (the project's ``shared/PAPER.md``: FrozenLake, Qwen3-4B base vs GRPO,
    unless noted) next to this run's figures, as ``(finding, paper, figures)``; the
    pre-registered RL arm vs base wherever the paper compares RL with the base."""
    rl, t_max = s["rl_arm"], int(s["config"]["t_max"])
    head = s["headline_pass1_tmax"]
    gap = s["gap_surfaces"][rl]
    ks = [k for k in (1, 2, 4, 8, 16) if k in gap["ks"]]
    k8 = 8 if 8 in gap["ks"] else max(gap["ks"])
    ts = [t for t in gap["ts"] if t >= max(1, t_max - 2)]
    held = s["base_agreement"]["held_out"]
    rows: list[tuple[str, str, list[Figure]]] = [
        (
            "Base reads the observation: held-out p(expert move)",
            "(a pretrained 4B model)",
            [("greedy", held["greedy"], "num"), ("sampled", held["sampled"], "num")],
        ),
        (
            f"Pass@(1,{t_max}) on held-out tasks, base and RL ({rl})",
            "RL above base (trajectory success)",
            [
                ("base", head[rl]["base"]["estimate"], "num"),
                (rl, head[rl]["arm"]["estimate"], "num"),
                ("gain", head[rl]["diff"]["estimate"], "gap"),
                ("CI low", head[rl]["diff"]["low"], "gap"),
            ],
        ),
    ]
    for key, name, paper in (
        ("same_state_normal", "normal states", "42.8 %"),
        ("same_state_error", "error states", "65.7 %"),
    ):
        c = s[key]
        rows.append(
            (
                f"RL's action better at the same state, {name} (per state; ties not better)",
                paper,
                [
                    ("better", c["win_rate"]["estimate"], "pct"),
                    ("tied", c["tie_rate"]["estimate"], "pct"),
                    ("worse", c["loss_rate"]["estimate"], "pct"),
                    ("mean score diff", c["mean_score_diff"]["estimate"], "gap"),
                ],
            )
        )
    cont = s["continuation"]
    rows.append(
        (
            "Success continuing from an injected error state, RL vs base",
            "51.3 % vs 38.6 %",
            [
                ("RL", cont["rl"]["success_rate"]["estimate"], "pct"),
                ("base", cont["base"]["success_rate"]["estimate"], "pct"),
            ],
        )
    )
    rows.append(
        (
            f"K sweep: Pass@(K,{t_max}) RL - base",
            "RL stays ahead as K grows",
            [(f"K={k}", _gap_at(gap, k, t_max), "gap") for k in ks],
        )
    )
    rows.append(
        (
            f"T sweep: Pass@({k8},T) RL - base",
            "shrinking T shrinks the gain; on some tasks it reverses",
            [(f"T={t}", _gap_at(gap, k8, t), "gap") for t in ts],
        )
    )
    last = s["dynamics"]["points"][-1]
    rows.append(
        (
            "Training: trajectory reward vs step reward (step 0 to the last checkpoint)",
            "DeepCoder-MT: trajectory +0.331, step -0.097",
            [
                ("success", last["d_trajectory"]["estimate"], "gap"),
                ("step score", last["d_step"]["estimate"], "gap"),
            ],
        )
    )
    lik = s.get("likelihood") or {}
    if lik:
        rows.append(
            (
                "Cumulative LLR log p_RL - log p_base of successful trajectories (nats)",
                "RL's ~228 vs base's ~26",
                [
                    (
                        "RL's",
                        lik["rl"]["llr_rl_minus_base"]["success"]["mean"]["estimate"],
                        "num",
                    ),
                    (
                        "base's",
                        lik["base"]["llr_rl_minus_base"]["success"]["mean"]["estimate"],
                        "num",
                    ),
                ],
            )
        )
        rows.append(
            (
                "Action NLL under the base model (nats per action)",
                "Terminal-Bench: RL 12.20 vs base 10.25",
                [
                    (
                        "RL's actions",
                        lik["rl"]["nll_under_base"]["all"]["per_action"]["estimate"],
                        "num",
                    ),
                    (
                        "base's",
                        lik["base"]["nll_under_base"]["all"]["per_action"]["estimate"],
                        "num",
                    ),
                ],
            )
        )
    rows.append(
        (
            f"Process reward / GiGPO vs outcome reward: Pass@(1,{t_max}) - base",
            "exact process reward helps on FrozenLake",
            [(arm, h["diff"]["estimate"], "gap") for arm, h in head.items()],
        )
    )
    if "budgetmix" in s["gap_surfaces"]:
        mix = s["gap_surfaces"]["budgetmix"]
        fixed = next((a for a in head if a.startswith("outcome")), rl)
        rows.append(
            (
                f"BudgetMix vs fixed T: Pass@(1,T) - base at T = {ts[0]} / {t_max}",
                "robust across budgets (no numbers)",
                [
                    (f"budgetmix T={ts[0]}", _gap_at(mix, 1, ts[0]), "gap"),
                    (f"budgetmix T={t_max}", _gap_at(mix, 1, t_max), "gap"),
                    (f"{fixed} T={ts[0]}", _gap_at(s["gap_surfaces"][fixed], 1, ts[0]), "gap"),
                    (f"{fixed} T={t_max}", _gap_at(s["gap_surfaces"][fixed], 1, t_max), "gap"),
                ],
            )
        )
    return rows


def _figure(value: float | None, kind: str) -> str:
    if value is None or not np.isfinite(value):
        return "n/a"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    return f"{value:+.3f}" if kind == "gap" else f"{value:.2f}"


def paper_table(s: dict[str, Any]) -> str:
    """One seed's "paper vs miniature" table (markdown)."""
    lines = [
        "| finding | paper (FrozenLake, Qwen3-4B, unless noted) | miniature |",
        "|---|---|---|",
    ]
    for finding, paper, figures in paper_rows(s):
        text = ", ".join(f"{label} {_figure(v, kind)}" for label, v, kind in figures)
        lines.append(f"| {finding} | {paper} | {text} |")
    return "\n".join(lines)


def _pct(d: dict[str, Any]) -> str:
    return f"{d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def fingerprint_table(fingerprint: dict[str, Any]) -> str:
    """The fingerprint as a markdown table (one row per field, packages on one line)."""
    rows = [
        ("config digest", f"`{fingerprint['config_digest']}`"),
        ("seed", str(fingerprint["seed"])),
        ("torch CPU capability", str(fingerprint["cpu_capability"])),
        ("threads", str(fingerprint["threads"])),
        (
            "float-path variables",
            ", ".join(f"{k}={v}" for k, v in fingerprint["float_path_env"].items()) or "none set",
        ),
        ("packages", ", ".join(f"{k} {v}" for k, v in fingerprint["packages"].items())),
        ("python", str(fingerprint["python"])),
        ("code (commit)", str(fingerprint.get("commit", "unknown"))),
        ("CPU", f"{fingerprint['cpu']} ({fingerprint['machine']})"),
    ]
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def write_report(
    out: Path,
    s: dict[str, Any],
    surfaces: str,
    rl_vs_base: str,
    same_normal: str,
    same_error: str,
    continuation: list[str],
    likelihood: list[str],
    dynamics: str,
    dyn_png: Path,
) -> None:
    rl = s["rl_arm"]
    rows = "\n".join(
        f"| {name} | {h['arm']['estimate']:.3f} | {h['base']['estimate']:.3f} | {_pct(h['diff'])} |"
        for name, h in s["headline_pass1_tmax"].items()
    )
    pngs = sorted(p.name for p in out.glob("*.png"))
    kwargs = s["config"]["base"].get("env_kwargs", {})
    observation = f"`{kwargs.get('observation', 'full')}` (env kwargs `{json.dumps(kwargs)}`)"
    agreement = "\n".join(
        f"| {group} | {a['states']} | {a['greedy']:.3f} | {a['sampled']:.3f} "
        f"| {a['malformed']:.3f} |"
        for group, a in s["base_agreement"].items()
    )
    times = "\n".join(
        f"| {k} | {v:.1f} | {s['cpu_s'][k]:.1f} |" if k in s["cpu_s"] else f"| {k} | {v:.1f} | |"
        for k, v in s["timings_s"].items()
    )
    logs = "\n".join(
        f"| {name} | "
        + " ".join(f"{e['reward']:.2f}" for e in log)
        + " | "
        + " ".join(f"{e['env/step_score']:.2f}" for e in log)
        + " |"
        for name, log in s["train_logs"].items()
    )
    text = f"""# The study in miniature (FrozenLake, seed {s["config"]["seed"]})

One seed is one draw of a chaotic training run: on another machine (another floating-point
path) its figures move by several points. The study's conclusion is the one pooled over seeds
(`spread.py`, `spread.md` beside the seed folders); compare this seed's digits with another
run's only when the fingerprints below match.

{fingerprint_table(s["fingerprint"])}

Training maps: {len(s["train_tasks"])}; held-out maps: {len(s["eval_tasks"])} (layouts disjoint).
Hidden budget T_max = {s["config"]["t_max"]}; {s["config"]["eval"]["samples"]} samples per map.
Observation: {observation}. RL = the pre-registered arm **{rl}** (outcome reward, the paper's
GRPO) wherever the paper compares RL with the base; every difference is RL - base (arm - base),
as in the heatmaps.

## Paper vs miniature (this seed)

{paper_table(s)}

## Pass@(1,T_max) on held-out maps, arm - base (paired 95% CI over maps, this seed)

| arm | arm | base | difference [95% CI] |
|---|---|---|---|
{rows}

## The base: does it read the map?

States of noisy-expert episodes ({s["config"]["agreement_episodes"]} per group, the SFT data's
error share) on training and held-out maps; greedy = the greedy reply is the expert's move,
sampled = the probability of the expert's call (what a temperature-1 sample matches).

| maps | states | p(expert move) greedy | sampled | malformed greedy replies |
|---|---|---|---|---|
{agreement}

## Pass@(K,T) surfaces (base first; then each arm - base)

```
{surfaces}
```

## RL ({rl}) vs base

```
{rl_vs_base}
```

## Same-state comparison ({rl} = A vs base = B), states the base visits

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

## Action NLL and cumulative LLR ({rl} vs base), split by success

```
{chr(10).join(likelihood)}
```

## Training dynamics ({rl}, held-out maps, checkpoints)

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

## Timings

Wall seconds on this machine under its load, and CPU seconds (this process and the arms'
worker processes): on a quiet machine a stage takes about its CPU seconds.

| stage | wall s | CPU s |
|---|---|---|
{times}
"""
    (out / "report.md").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(Path(__file__).with_name("config.json")))
    parser.add_argument("--out", default=None, help="the seed's folder (runs/study/seed-<seed>)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--arms",
        default=None,
        help="arms to train: 'all', or names joined by commas (default: the config's "
        "default_arms; the pre-registered RL arm always runs)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for every stage (default: the config's base.threads); another "
        "count is another float path",
    )
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="arms trained side by side"
    )
    parser.add_argument(
        "--base-only",
        action="store_true",
        help="build and check the base alone (expert agreement, held-out Pass@(1,T_max))",
    )
    args = parser.parse_args()
    import sys

    try:
        config = choose_arms(read_config(args.config), args.arms)
    except (OSError, ValueError, KeyError) as exc:
        print(f"study: {args.config}: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    if args.seed is not None:
        config["seed"] = args.seed
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        config["base"]["threads"] = args.threads
    import torch

    # one thread count for every stage of the run (SFT, arms, evaluation): it is part of the
    # float path, so the fingerprint records it
    torch.set_num_threads(int(config["base"].get("threads") or 1))
    torch.manual_seed(int(config["seed"]))
    out = Path(args.out or f"runs/study/seed-{config['seed']}")
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    try:
        check_float_path(out, study_fingerprint(config), say)  # before any work
    except NotAStudyFolder as exc:
        print(f"study: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    if args.base_only:
        found = run_base(config, out, say)
        for group, a in found["agreement"].items():
            print(
                f"{group:>9} states: {a['states']}, p(expert move) greedy {a['greedy']:.3f}, "
                f"sampled {a['sampled']:.3f}, malformed {a['malformed']:.3f}"
            )
        p1 = found["pass1_tmax"]
        print(
            f"held-out Pass@(1,T_max) {p1['estimate']:.3f} [{p1['low']:.3f}, {p1['high']:.3f}]; "
            f"base built in {found['base_seconds']:.0f} s"
        )
        return
    summary = run_study(config, out, say, jobs=args.jobs)
    for name, h in summary["headline_pass1_tmax"].items():
        print(f"{name:>12}: Pass@(1,T_max) arm - base = {_pct(h['diff'])} (this seed)")
    print(
        f"RL arm: {summary['rl_arm']}; total {summary['timings_s']['total_s']:.0f} s "
        f"({summary['cpu_s']['total_s']:.0f} CPU s); report: {out / 'report.md'}"
    )


if __name__ == "__main__":
    main()
