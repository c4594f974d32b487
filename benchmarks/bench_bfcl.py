"""MT/BFCL-v0 benchmarks: AST checks per second, and multi-turn step latency vs a rebuild baseline.

1. AST checks/s of our checker on the expert answers of the single-turn entries, against BFCL's
   own ``ast_checker`` (when bfcl-eval is installed) on the same inputs, in the same run.
2. Multi-turn step latency: our env keeps one private backend set per episode; the anchor
   re-creates the backends from the initial config at every step and replays the calls so far
   (what a stateless server would do). Both run the expert over the same entries.

Prints ratios (ours / anchor for throughput, anchor / ours for latency); no absolute claims.
Usage: ``.venv/bin/python benchmarks/bench_bfcl.py [--source bundled|bfcl-eval] [--entries N]``
"""

from __future__ import annotations

import argparse
import sys
import time
import types

from multiturn_envs.envs.bfcl.ast_checker import check_single_turn
from multiturn_envs.envs.bfcl.backends import BackendSet
from multiturn_envs.envs.bfcl.calls import decode
from multiturn_envs.envs.bfcl.data import bfcl_eval_available
from multiturn_envs.envs.bfcl.env import BFCLEnv
from multiturn_envs.envs.bfcl.single_turn import expert_calls


def bench_ast(source: str, repeats: int) -> None:
    env = BFCLEnv(category="single_turn", source=source, max_turns=1)
    cases = []
    for task_id in env.task_ids():
        entry = env.entry(task_id)
        if entry.ground_truth is not None:
            cases.append((entry, expert_calls(entry)))
    start = time.perf_counter()
    for _ in range(repeats):
        for entry, calls in cases:
            check_single_turn(entry.functions, calls, entry.ground_truth, entry.category)
    ours = len(cases) * repeats / (time.perf_counter() - start)
    print(f"AST checks/s (ours): {ours:,.0f} over {len(cases)} entries x {repeats}")
    if not bfcl_eval_available():
        print("AST anchor: bfcl-eval not installed, no ratio")
        return
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)

        class _Any(dict):
            def __missing__(self, key: str) -> types.SimpleNamespace:
                return types.SimpleNamespace(underscore_to_dot=False)

        stub.MODEL_CONFIG_MAPPING = _Any()
        sys.modules[name] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    outputs = [[{c.name: dict(c.kwargs)} for c in calls] for _, calls in cases]
    start = time.perf_counter()
    for _ in range(repeats):
        for (entry, _), output in zip(cases, outputs):
            ast_checker(
                entry.functions,
                output,
                entry.ground_truth,
                Language.PYTHON,
                entry.category,
                "model",
            )
    anchor = len(cases) * repeats / (time.perf_counter() - start)
    print(
        f"AST checks/s (BFCL ast_checker anchor): {anchor:,.0f}; ratio ours/anchor = "
        f"{ours / anchor:.2f}"
    )


def bench_steps(source: str, n_entries: int) -> None:
    env = BFCLEnv(category="multi_turn_base", source=source, max_turns=None)
    entries = [env.entry(t) for t in list(env.task_ids())[:n_entries]]
    # One step = one call, or one turn-ending reply (which executes nothing).
    steps_per_entry = [
        [c for turn in e.ground_truth for c in [*(decode(t).calls[0] for t in turn), None]]
        for e in entries
    ]

    def persistent() -> int:
        n = 0
        for entry, steps in zip(entries, steps_per_entry):
            backends = BackendSet(entry.involved_classes, entry.initial_config, entry.long_context)
            for call in steps:
                if call is not None:
                    backends.execute(call)
                n += 1
        return n

    def rebuild() -> int:
        n = 0
        for entry, steps in zip(entries, steps_per_entry):
            history: list = []
            for call in steps:
                backends = BackendSet(
                    entry.involved_classes, entry.initial_config, entry.long_context
                )
                for old in history:
                    backends.execute(old)
                if call is not None:
                    backends.execute(call)
                    history.append(call)
                n += 1
        return n

    persistent()  # warm imports and caches for both
    start = time.perf_counter()
    n = persistent()
    ours = (time.perf_counter() - start) / n
    start = time.perf_counter()
    n_anchor = rebuild()
    anchor = (time.perf_counter() - start) / n_anchor
    print(
        f"backend step latency (ours: one private backend set per episode): "
        f"{ours * 1e3:.3f} ms over {n} steps"
    )
    print(
        f"backend step latency (anchor: rebuild from initial config + replay each step): "
        f"{anchor * 1e3:.3f} ms; ratio anchor/ours = {anchor / ours:.1f}"
    )
    start = time.perf_counter()
    steps = 0
    for entry in entries:
        env.reset(seed=0, options={"task_id": entry.id})
        while not env.done:
            env.step(env.expert_action())
            steps += 1
    full = (time.perf_counter() - start) / steps
    print(
        f"full env step latency (expert action, oracle score, BFCL checks, snapshot-free): "
        f"{full * 1e3:.3f} ms over {steps} steps; ratio anchor/full-env = {anchor / full:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="auto")
    parser.add_argument("--entries", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    bench_ast(args.source, args.repeats)
    bench_steps(args.source, args.entries)


if __name__ == "__main__":
    main()
