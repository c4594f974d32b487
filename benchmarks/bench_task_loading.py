"""Loading terminal task folders through the bounded readers vs reading the same files plainly.

Ours: ``load_harbor_task`` on each bundled task folder (39 Harbor folders: ``task.toml``,
``instruction.md``, ``tests/``, ``solution/``, the build plan and the content hash of
``environment/``), and ``load_terminal_bench_task`` on each real Terminal-Bench 1 task in
``../shared/data/terminal-bench/tb1`` with ``image=`` given (the reading and validation only:
no engine call). Anchor, measured in the same run on the same folders: every file of each
folder read with ``Path.read_bytes`` (``rglob``, no bound, no check) and its metadata parsed
with ``tomllib.loads``/``yaml.safe_load``: the least any loader must do. Prints milliseconds
per folder for both and ``ratio = ours / anchor`` (the median over interleaved repeats).

Run: ``.venv/bin/python benchmarks/bench_task_loading.py [--repeats R]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import tomllib
import yaml

from multiturn_envs.envs.terminal.bundled import bundled_root
from multiturn_envs.envs.terminal.harbor import load_harbor_task
from multiturn_envs.envs.terminal.terminal_bench import load_terminal_bench_task

SHARED_DATA = Path(
    os.environ.get("MTE_SHARED_DATA", "")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
TB1 = SHARED_DATA / "terminal-bench" / "tb1"
"""``../shared/data`` beside the repository root (``$MTE_SHARED_DATA`` names it elsewhere)."""


def anchor(folder: Path, meta: str) -> None:
    """Every file of the folder read plainly, its metadata parsed."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            path.read_bytes()
    text = (folder / meta).read_text(encoding="utf-8")
    tomllib.loads(text) if meta.endswith(".toml") else yaml.safe_load(text)


def timed(call: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--inner", type=int, default=5, help="loads of each folder per repeat")
    args = parser.parse_args()
    bundled = sorted(p for p in bundled_root().iterdir() if (p / "task.toml").is_file())
    tb1 = sorted(p for p in TB1.glob("*") if (p / "task.yaml").is_file())
    if not tb1:
        print(f"no Terminal-Bench 1 tasks in {TB1}: only the bundled tasks are measured")
    sets = {
        f"bundled Harbor tasks ({len(bundled)})": (
            bundled,
            "task.toml",
            lambda f: load_harbor_task(f, task_prefix=""),
        ),
        f"Terminal-Bench 1 tasks ({len(tb1)})": (
            tb1,
            "task.yaml",
            lambda f: load_terminal_bench_task(f, image="given"),
        ),
    }
    for name, (folders, meta, load) in sets.items():
        if not folders:
            continue
        ours_ms: list[float] = []
        anchor_ms: list[float] = []
        ratios: list[float] = []
        for _ in range(args.repeats):
            # interleaved: load on the shared machine hits both alike
            a = sum(timed(lambda f=f, m=meta: anchor(f, m), args.inner) for f in folders)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                o = sum(timed(lambda f=f, ld=load: ld(f), args.inner) for f in folders)
            per = 1000 / (len(folders) * args.inner)
            ours_ms.append(o * per)
            anchor_ms.append(a * per)
            ratios.append(o / a)
        print(
            f"{name}: ours {statistics.median(ours_ms):.2f} ms/folder, anchor (plain reads) "
            f"{statistics.median(anchor_ms):.2f} ms/folder, ratio {statistics.median(ratios):.2f}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
