"""The ``multiturn-envs`` console script: ``list``, ``eval``, ``compare``, ``report``, ``nll``,
``llr``, ``dynamics``, ``sandbox``.

A thin layer over the library: it parses arguments, resolves the env, tasks and policy, and
hands over to :mod:`multiturn_envs.harness`. Its one promise of its own: a user mistake (a bad
argument, an unknown env id, a record file of another run) prints ONE line on stderr and exits
with status 2, never a traceback. Failures inside a run (a bug in an env or a policy) keep their
traceback, because that is what one needs to fix them. ``Ctrl-C`` exits with 130 and says how to
resume. docs/cli.md documents every option.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A mistake of the user's: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


# ---------------------------------------------------------------------------------- helpers
def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``["size=8", "is_slippery=false", "name=abc"]`` -> kwargs (JSON values, else strings)."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(
                f"--env-arg wants key=value with a Python identifier key, got {pair!r}"
            )
        try:
            kwargs[key] = json.loads(raw)
        except ValueError:
            kwargs[key] = raw
    return kwargs


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{what} wants comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"{what} wants positive ints, got {text!r}")
    return values


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    """``gym.make`` with user errors turned into :class:`UsageError`."""
    import gymnasium as gym

    import multiturn_envs  # noqa: F401  (registers the MT/* ids)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return gym.make(env_id, **env_kwargs)
    except gym.error.UnregisteredEnv as exc:
        raise UsageError(
            f"unknown env id {env_id!r} ({exc}); `multiturn-envs list` shows the ids"
        ) from None
    except ImportError as exc:
        raise UsageError(f"env {env_id!r} cannot be imported: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"env {env_id!r} rejected its arguments: {exc}") from None


def resolve_tasks(available: Sequence[str], spec: str | None) -> list[str]:
    """``None`` -> all tasks; ``"N"`` -> the first N; ``"a,b"`` -> those ids (checked)."""
    ids = [str(t) for t in available]
    if spec is None:
        return ids
    spec = spec.strip()
    if spec.isdigit():
        n = int(spec)
        if n < 1:
            raise UsageError("--tasks N wants N >= 1")
        if n > len(ids):
            raise UsageError(f"--tasks {n}: the env has only {len(ids)} tasks")
        return ids[:n]
    wanted = [t.strip() for t in spec.split(",") if t.strip()]
    known = set(ids)
    unknown = [t for t in wanted if t not in known]
    if unknown:
        example = ", ".join(ids[:3])
        raise UsageError(f"unknown task id(s) {unknown[:3]}; the env's ids look like: {example}")
    if len(set(wanted)) != len(wanted):
        raise UsageError("--tasks lists a task id twice")
    return wanted


def _default_out(env_id: str, policy: str, samples: int, max_turns: int, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{env_id}_{policy}").strip("_")
    return str(Path("runs") / f"{slug}_K{samples}_T{max_turns}_s{seed}.jsonl")


# ---------------------------------------------------------------------------------- commands
def cmd_list(args: argparse.Namespace) -> int:
    """Print every MT/* id with the first line of its env class's docstring."""
    import gymnasium as gym

    import multiturn_envs

    ids = sorted({*multiturn_envs.env_ids(), *(i for i in gym.registry if i.startswith("MT/"))})
    width = max((len(i) for i in ids), default=0)
    for env_id in ids:
        spec = gym.registry.get(env_id)
        line = ""
        try:
            entry = spec.entry_point if spec is not None else None
            if isinstance(entry, str):
                module_name, _, attr = entry.partition(":")
                entry = getattr(importlib.import_module(module_name), attr)
            doc = (getattr(entry, "__doc__", None) or "").strip()
            line = doc.splitlines()[0] if doc else ""
        except Exception as exc:  # an env whose optional deps are missing still gets listed
            line = f"(unavailable here: {type(exc).__name__}: {exc})"
        print(f"{env_id:<{width}}  {line}")
    return 0


def _executor_of(args: argparse.Namespace, load_policy: Any, policy_spec: str) -> Any:
    """``--executor``: ``None`` (this process) or a ``RayExecutor`` running ``policy_spec``
    (docs/scale-out.md)."""
    if args.executor == "local":
        for flag in ("ray_address", "ray_workers", "policy_placement", "policy_actors"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} needs --executor ray")
        return None
    if importlib.util.find_spec("ray") is None:
        raise UsageError("--executor ray needs Ray: pip install 'multiturn-envs[ray]'")
    for flag in ("ray_workers", "policy_actors"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    from multiturn_envs.harness.executors import RayExecutor

    return RayExecutor(
        address=args.ray_address,
        num_workers=args.ray_workers,
        policy_placement=args.policy_placement or "worker",
        policy_actors=args.policy_actors or 1,
        policy_factory=functools.partial(load_policy, policy_spec),
    )


def cmd_eval(args: argparse.Namespace) -> int:
    from multiturn_envs.harness.records import RecordFileError
    from multiturn_envs.harness.rollout import EvalConfig, run_eval
    from multiturn_envs.policies.spec import load_policy
    from multiturn_envs.wrappers import text_env_of

    env_kwargs = parse_env_args(args.env_arg)
    for reserved in ("max_turns", "budget_mode"):
        if reserved in env_kwargs:
            raise UsageError(f"set {reserved} with --{reserved.replace('_', '-')}, not --env-arg")
    env = _make_env(args.env_id, env_kwargs)
    try:
        base = text_env_of(env)
        tasks = resolve_tasks(base.task_ids(), args.tasks)
    except TypeError as exc:
        raise UsageError(str(exc)) from None
    finally:
        env.close()
    try:
        policy = load_policy(args.policy)
    except (ValueError, ImportError, OSError) as exc:
        raise UsageError(f"policy {args.policy!r}: {exc}") from None
    try:
        config = EvalConfig(
            env_id=args.env_id,
            policy=args.policy,
            tasks=tasks,
            samples=args.samples,
            max_turns=args.max_turns,
            budget_mode=args.budget_mode,
            turn_grid=_int_list(args.turn_grid, "--turn-grid") if args.turn_grid else None,
            error_after=args.error_after,
            seed=args.seed,
            env_kwargs=env_kwargs,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = args.out or _default_out(
        args.env_id, args.policy, args.samples, args.max_turns, args.seed
    )
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
            executor=_executor_of(args, load_policy, args.policy),
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


def cmd_report(args: argparse.Namespace) -> int:
    from multiturn_envs.harness import report
    from multiturn_envs.harness.records import RecordFileError

    try:
        text = report.main_report(
            args.files,
            out_dir=args.out_dir,
            ks=_int_list(args.ks, "--ks") if args.ks else None,
            ts=_int_list(args.ts, "--ts") if args.ts else None,
            bootstrap=args.bootstrap,
            alpha=args.alpha,
            seed=args.seed,
            plots=not args.no_plots,
        )
    except FileNotFoundError as exc:
        raise UsageError(f"no such record file: {exc.filename}") from None
    except (RecordFileError, ValueError, KeyError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    print(text)
    return 0


def _analysis_module() -> Any:
    if importlib.util.find_spec("multiturn_envs.harness.analysis") is None:
        raise UsageError("compare needs multiturn_envs.harness.analysis, missing in this install")
    return importlib.import_module("multiturn_envs.harness.analysis")


def cmd_compare(args: argparse.Namespace) -> int:
    """Same-state comparison or error-state continuation of two policies (the analyses module)."""
    from multiturn_envs.policies.spec import load_policy
    from multiturn_envs.wrappers import text_env_of

    analysis = _analysis_module()
    env_kwargs = parse_env_args(args.env_arg)
    env = _make_env(args.env_id, env_kwargs)
    try:
        tasks = resolve_tasks(text_env_of(env).task_ids(), args.tasks)
    finally:
        env.close()
    try:
        policy_a, policy_b = load_policy(args.policy_a), load_policy(args.policy_b)
    except (ValueError, ImportError, OSError) as exc:
        raise UsageError(str(exc)) from None
    runner = getattr(analysis, "run_compare_cli", None)
    if runner is None:
        raise UsageError("this analyses module offers no command-line comparison")
    result = runner(
        mode=args.mode,
        env_id=args.env_id,
        env_kwargs=env_kwargs,
        policy_a=policy_a,
        policy_b=policy_b,
        tasks=tasks,
        states_from=args.states_from,
        n_actions=args.actions,
        samples=args.samples,
        max_turns=args.max_turns,
        error_after=args.error_after,
        seed=args.seed,
        out=args.out,
        executors=(
            _executor_of(args, load_policy, args.policy_a),
            _executor_of(args, load_policy, args.policy_b),
        ),
    )
    print(result if isinstance(result, str) else json.dumps(result, indent=2, default=str))
    return 0


def _analysis_errors(run: Any) -> Any:
    """Run an analysis; a user's mistake (missing file, bad spec, wrong records) -> one line."""
    from multiturn_envs.harness.records import RecordFileError

    try:
        return run()
    except FileNotFoundError as exc:
        raise UsageError(f"no such file: {exc.filename}") from None
    except (RecordFileError, ValueError, ImportError, OSError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None


def cmd_nll(args: argparse.Namespace) -> int:
    """Mean action NLL of each record file's actions under one scoring model."""
    from multiturn_envs.harness.mechanism import run_nll_cli

    text = _analysis_errors(
        lambda: run_nll_cli(
            args.files,
            args.model,
            system_prompt=args.system_prompt,
            n_boot=args.bootstrap,
            alpha=args.alpha,
            seed=args.seed,
            out=args.out,
        )
    )
    print(text)
    return 0


def cmd_llr(args: argparse.Namespace) -> int:
    """Cumulative LLR log p_A - log p_B of each trajectory, split by success."""
    from multiturn_envs.harness.mechanism import run_llr_cli

    text = _analysis_errors(
        lambda: run_llr_cli(
            args.files,
            args.model_a,
            args.model_b,
            system_prompt=args.system_prompt,
            n_boot=args.bootstrap,
            alpha=args.alpha,
            seed=args.seed,
            out=args.out,
        )
    )
    print(text)
    return 0


def _step_list(text: str) -> list[int]:
    """``--steps``: comma-separated training steps, 0 allowed."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise UsageError(f"--steps wants comma-separated ints >= 0, got {text!r}")
    return values


def cmd_dynamics(args: argparse.Namespace) -> int:
    """Trajectory reward against step reward over checkpoints (one record file each)."""
    from multiturn_envs.harness.dynamics import run_dynamics_cli

    text = _analysis_errors(
        lambda: run_dynamics_cli(
            args.files,
            labels=args.labels.split(",") if args.labels else None,
            steps=_step_list(args.steps) if args.steps else None,
            trajectory_reward=args.trajectory_reward,
            n_boot=args.bootstrap,
            alpha=args.alpha,
            seed=args.seed,
            plot=args.plot,
            out=args.out,
        )
    )
    print(text)
    return 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    """Delegate ``sandbox build ...`` to :func:`multiturn_envs.sandbox.image.main` when present."""
    try:
        module = importlib.import_module("multiturn_envs.sandbox.image")
    except ModuleNotFoundError as exc:
        if exc.name != "multiturn_envs.sandbox.image":
            raise
        raise UsageError("sandbox commands are not available in this installation") from None
    result = module.main([args.sandbox_command, *args.rest])
    return int(result or 0)


# ---------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="multiturn-envs",
        description="Multi-turn text environments and the Pass@(K,T) harness.",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("list", help="list the MT/* env ids")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("eval", help="run a policy on an env: N tasks x K samples, JSONL records")
    p.add_argument("env_id", help="e.g. MT/FrozenLake-v0 (or module:Namespace/Name-v0)")
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="K=V",
        help="a gym.make keyword argument (JSON value, else a string); repeatable",
    )
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
    p.add_argument("--samples", "-k", type=int, default=8, help="K trajectories per task")
    p.add_argument("--max-turns", "-t", type=int, default=8, help="T_max, the turn budget")
    p.add_argument("--budget-mode", choices=("hidden", "announced"), default="hidden")
    p.add_argument(
        "--turn-grid",
        default=None,
        help="announced mode: comma-separated budgets to run (default 1..T_max)",
    )
    p.add_argument(
        "--error-after",
        type=int,
        default=None,
        metavar="k",
        help="inject an error after k expert steps (ErrorInjection)",
    )
    p.add_argument("--seed", type=int, default=0, help="run seed (non-negative)")
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
        type=int,
        default=64,
        help="episodes in flight = env instances = largest policy batch",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="threads stepping envs (raise for slow envs: sandboxes, databases)",
    )
    _add_executor_args(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", help="Pass@(K,T) tables and PNG plots from record files")
    p.add_argument("files", nargs="+", help="one or more .jsonl record files")
    p.add_argument("--out-dir", default=None, help="where PNGs go (default: beside the first file)")
    p.add_argument("--ks", default=None, help="comma-separated K values (default 1..n)")
    p.add_argument("--ts", default=None, help="comma-separated T values (default 1..T_max)")
    p.add_argument(
        "--bootstrap",
        type=int,
        default=2000,
        help="bootstrap resamples over tasks for CIs (0: none)",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="1 - confidence level")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="same-state comparison / error-state continuation")
    _add_compare_args(p)
    p.set_defaults(func=cmd_compare)

    _add_analysis_parsers(sub)

    p = sub.add_parser("sandbox", help="sandbox images (e.g. `sandbox build`)")
    p.add_argument("sandbox_command", help="e.g. build")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the sandbox command")
    p.set_defaults(func=cmd_sandbox)
    return parser


def _add_ci_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", type=int, default=2000, help="resamples over tasks (0: none)")
    p.add_argument("--alpha", type=float, default=0.05, help="1 - confidence level")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--out", default=None, help="also write the numbers as JSON here")


def _add_analysis_parsers(sub: Any) -> None:
    """``nll``, ``llr`` and ``dynamics`` (docs/analyses.md defines every number they print)."""
    model_help = "scoring model: hf:<folder or smollm2>[,gguf=F][,dtype=..] | vllm:<model> | "
    model_help += "openai:<base_url>,model=<id>,tokenizer=<folder>"
    p = sub.add_parser("nll", help="mean action NLL of record files' actions under a model")
    p.add_argument("files", nargs="+", help="record files (.jsonl), one per policy")
    p.add_argument("--model", required=True, help=model_help)
    p.add_argument("--system-prompt", default=None, help="override the env's system prompt")
    _add_ci_args(p)
    p.set_defaults(func=cmd_nll)

    p = sub.add_parser("llr", help="cumulative LLR log p_A - log p_B per trajectory, by success")
    p.add_argument("files", nargs="+", help="record files (.jsonl)")
    p.add_argument("--model-a", required=True, help="the numerator model, e.g. the RL one")
    p.add_argument("--model-b", required=True, help="the reference model, e.g. the base one")
    p.add_argument("--system-prompt", default=None, help="override the env's system prompt")
    _add_ci_args(p)
    p.set_defaults(func=cmd_llr)

    p = sub.add_parser("dynamics", help="trajectory vs step reward across checkpoints")
    p.add_argument("files", nargs="+", help="one record file per checkpoint, in training order")
    p.add_argument("--labels", default=None, help="comma-separated checkpoint names")
    p.add_argument("--steps", default=None, help="comma-separated training steps (x axis)")
    p.add_argument(
        "--trajectory-reward",
        choices=("success", "return"),
        default="success",
        help="per trajectory: success (0/1) or the summed env reward",
    )
    p.add_argument("--plot", default=None, metavar="PNG", help="write the two curves here")
    _add_ci_args(p)
    p.set_defaults(func=cmd_dynamics)


def _add_executor_args(p: argparse.ArgumentParser) -> None:
    """Where episodes run (``eval`` and ``compare``): this process or Ray workers."""
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: this process; ray: shard over Ray workers (docs/scale-out.md)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to join (auto | host:port); default RAY_ADDRESS, else a local Ray",
    )
    p.add_argument(
        "--ray-workers",
        type=int,
        default=None,
        help="rollout workers (default: cluster CPUs); --in-flight/--workers are per worker",
    )
    p.add_argument(
        "--policy-placement",
        choices=("worker", "actor-pool"),
        default=None,
        help="worker: a policy per rollout worker (default); actor-pool: shared policy actors",
    )
    p.add_argument(
        "--policy-actors",
        type=int,
        default=None,
        help="actor-pool size (default 1)",
    )


def _add_compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id", help="e.g. MT/FrozenLake-v0")
    p.add_argument(
        "--mode",
        choices=("same-state", "continuation"),
        default="same-state",
        help="same-state: N actions per policy from one snapshot, oracle-scored; "
        "continuation: success from injected error states",
    )
    p.add_argument("--policy-a", required=True, help="the reference policy (spec as in eval)")
    p.add_argument("--policy-b", required=True, help="the policy compared with A")
    p.add_argument("--env-arg", action="append", default=[], metavar="K=V")
    p.add_argument("--tasks", default=None, help="N or comma-separated task ids (default: all)")
    p.add_argument(
        "--states-from",
        default=None,
        metavar="RECORDS.jsonl",
        help="take states from the trajectories of a record file",
    )
    p.add_argument("--actions", type=int, default=16, help="actions per policy and state")
    p.add_argument("--samples", "-k", type=int, default=8, help="continuations per task")
    p.add_argument("--max-turns", "-t", type=int, default=8, help="turn budget")
    p.add_argument(
        "--error-after",
        type=int,
        default=1,
        metavar="k",
        help="expert steps before the injected error",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the comparison as JSON here")
    _add_executor_args(p)  # the episodes compare runs (states, continuations)


def _positive(args: argparse.Namespace) -> None:
    for name in ("samples", "max_turns", "in_flight", "workers"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if getattr(args, "error_after", None) is not None and args.error_after < 0:
        raise UsageError(f"--error-after must be >= 0, got {args.error_after}")
    if getattr(args, "seed", None) is not None and args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        _positive(args)
        return int(args.func(args))
    except UsageError as exc:
        print(f"multiturn-envs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "multiturn-envs: interrupted; rerun the same command to resume where it stopped",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
