"""Agreement of MT/InterCode-SQL-v0 with InterCode on MySQL 8, per published model run.

Replays InterCode's five published 10-turn runs (every action, ``scoring="intercode"``,
``end_on_success=False``, ``mysql_strict=True``) through the env and prints, per model, how
many actions get InterCode's reward, how many trajectories agree on success, the causes of
the differences, the exact-mode regression check, and the replay time. The anchor, measured
in the same run, is the same replay with the MySQL emulation switched off
(``mysql_row_order=False``, ``mysql_strict=False``: plain SQLite with the MySQL habits the env
had before), so the ratio says what the order and strictness emulation buys.

    .venv/bin/python benchmarks/bench_intercode_agreement.py [--data ../shared/data/intercode]
        [--models gpt-3.5 vicuna] [--processes 5] [--no-anchor]

The data: InterCode's repository (princeton-nlp/intercode), ``data/sql/spider/ic_spider_dev.json``
and ``data/results/sql/<model>/ic_sql_multiturn_<model>_10_turns.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from multiturn_envs.envs.intercode_sql.published_runs import (
    PUBLISHED_MODELS,
    agreement_table,
    replay_published_runs,
)

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "intercode"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--models", nargs="+", default=list(PUBLISHED_MODELS))
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--no-anchor", action="store_true", help="skip the emulation-off replay")
    args = parser.parse_args()

    start = time.perf_counter()
    ours = replay_published_runs(args.data, args.models, args.processes)
    wall = time.perf_counter() - start
    print("## MySQL emulation on (the env's replay configuration)\n")
    print(agreement_table(ours))
    print()
    for a in ours:
        causes = ", ".join(f"{cause}: {n}" for cause, n in a.causes.most_common()) or "none"
        print(
            f"{a.model}: {a.actions:,} actions ({a.not_run} never ran), differences by cause: "
            f"{causes}; success {a.successes_ours} ours vs {a.successes_intercode} InterCode's; "
            f"replay {a.seconds:.1f} s"
        )
    print(f"\nreplay of {len(ours)} runs: {wall:.1f} s wall")
    if args.no_anchor:
        return
    start = time.perf_counter()
    anchor = replay_published_runs(
        args.data, args.models, args.processes, {"mysql_row_order": False, "mysql_strict": False}
    )
    anchor_wall = time.perf_counter() - start
    print("\n## Anchor: row order and strictness off (mysql_row_order=False, mysql_strict=False)\n")
    print(agreement_table(anchor))
    print()
    for a, b in zip(ours, anchor, strict=True):
        wrong_on, wrong_off = a.executed - a.same_reward, b.executed - b.same_reward
        ratio = wrong_off / wrong_on if wrong_on else float("inf")
        print(
            f"{a.model}: differing actions {wrong_off} -> {wrong_on} (ratio {ratio:.1f}x fewer); "
            f"differing trajectories {b.episodes - b.same_success} -> {a.episodes - a.same_success}"
        )
    print(f"\nanchor replay: {anchor_wall:.1f} s wall (ratio to ours: {anchor_wall / wall:.2f}x)")


if __name__ == "__main__":
    main()
