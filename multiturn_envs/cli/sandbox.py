"""``multiturn-envs sandbox ...``: the sandbox images.

``sandbox build|status|reap`` is the DeepCoder code sandbox (:mod:`multiturn_envs.sandbox.image`);
``sandbox terminal build|status`` is MT/Terminal-v0's shell image
(:mod:`multiturn_envs.sandbox.terminal_image`). Both build offline when no registry answers.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from multiturn_envs.cli.common import Parser, add_flags, user_errors
from multiturn_envs.sandbox.engine import IMAGE


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sandbox",
        help="sandbox images: `sandbox build`, `sandbox terminal build`",
        description="Build and inspect the sandbox images (docs/sandbox.md).",
    )
    cmds = p.add_subparsers(dest="sandbox_command", parser_class=Parser, metavar="COMMAND")
    cmds.required = True
    b = cmds.add_parser(
        "build",
        help="build the DeepCoder code sandbox image",
        description="Try the Dockerfile (needs a pullable base image), else the offline "
        "bootstrap (debootstrap of a minimal Debian; needs root and a Debian mirror).",
    )
    add_flags(b, "--tag")
    b.add_argument("--offline", action="store_true", help="skip the Dockerfile attempt")
    b.set_defaults(func=run_build)
    s = cmds.add_parser("status", help="say whether the docker code sandbox can run (exit 0/1)")
    s.set_defaults(func=run_status)
    r = cmds.add_parser("reap", help="remove sandbox containers whose owner process is gone")
    r.set_defaults(func=run_reap)
    f = cmds.add_parser(
        "path",
        help="print the folder of the image definitions (Dockerfiles, bootstrap)",
        description="The folder of the image definitions shipped in the package, for a docker "
        'build of your\nown: docker build -t multiturn-envs-sandbox "$(multiturn-envs sandbox '
        'path)"',
    )
    f.set_defaults(func=run_path)

    t = cmds.add_parser("terminal", help="MT/Terminal-v0's image: build | status")
    tcmds = t.add_subparsers(dest="terminal_command", parser_class=Parser, metavar="COMMAND")
    tcmds.required = True
    tb = tcmds.add_parser("build", help="build the terminal image (offline)")
    tb.add_argument("--force", action="store_true", help="rebuild the base image too")
    add_flags(tb, "--tag")  # default: $MTE_TERMINAL_IMAGE, else multiturn-envs-terminal:latest
    tb.add_argument(
        "--extras",
        action="store_true",
        help="also compilers, numpy, pandas, node, vim, Rust, ... "
        "(sandboxes/terminal/packages-extra.txt); never under the default image's tag "
        "(without --tag: multiturn-envs-terminal:extras)",
    )
    tb.set_defaults(func=run_terminal_build)
    ts = tcmds.add_parser("status", help="say whether MT/Terminal-v0 can run (exit 0/1)")
    ts.set_defaults(func=run_terminal_status)
    tv = tcmds.add_parser(
        "verify",
        help="check that tasks run here (reference passes, empty submission fails)",
        description="Load a folder of Terminal-Bench 1 (task.yaml) or Harbor (task.toml) task "
        "folders, or one task folder, and run each task in MT/Terminal-v0: its reference "
        "solution (under the task's agent timeout) must pass and an empty submission fail. One "
        "line per task: its verdicts, or why it cannot run here, with the cause in one word. "
        "Exit 0 when every task does, 1 when one does not or cannot run here, 2 when a task "
        "folder is refused (malformed, or hostile: a link out of it, a file over its cap, a "
        "field out of range).",
    )
    tv.add_argument("folder", type=Path, help="a task folder or a folder of them")
    tv.add_argument(
        "--task-format",
        choices=("auto", "tb", "harbor"),
        default="auto",
        help="the task folders' format: auto (found per folder), tb (Terminal-Bench 1) or harbor",
    )
    tv.add_argument("--json", action="store_true", help="one JSON line per task")
    tv.set_defaults(func=run_terminal_verify)


def run_build(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.image import build

    with user_errors(RuntimeError):
        print(f"image: {build(args.tag or IMAGE, args.offline)}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.engine import docker_unavailable

    problem = docker_unavailable()
    print("docker sandbox: ready" if problem is None else f"docker sandbox: {problem}")
    return 0 if problem is None else 1


def run_path(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.recipes import recipes_folder

    print(recipes_folder())
    return 0


def run_reap(args: argparse.Namespace) -> int:
    import docker

    from multiturn_envs.sandbox.orphans import reap_orphans

    removed = reap_orphans(docker.from_env())
    print(f"removed {len(removed)} orphaned sandbox container(s)")
    return 0


def run_terminal_build(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.terminal_image import build

    with user_errors(RuntimeError):
        print(f"terminal image: {build(args.force, tag=args.tag, extras=args.extras)}")
    return 0


def run_terminal_status(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.terminal_image import terminal_unavailable

    problem = terminal_unavailable()
    print("terminal image: ready" if problem is None else f"terminal image: {problem}")
    return 0 if problem is None else 1


def _one_line(text: str) -> str:
    """A reason on one line (a build log's tail may hold several)."""
    return " ".join(text.split())


def run_terminal_verify(args: argparse.Namespace) -> int:
    from multiturn_envs.envs.terminal.verify import verify_folder

    with user_errors():
        rows = verify_folder(args.folder, args.task_format)
    for row in rows:
        if args.json:
            print(json.dumps({**asdict(row), "as_expected": row.as_expected}))
            continue
        if not row.loaded:
            what = (
                "REFUSED" if row.cause == "refused" else f"NOT RUNNABLE HERE ({row.cause or '?'})"
            )
            print(f"{row.task_id}: {what}: {_one_line(row.reason)}")
            continue
        verdict = "as expected" if row.as_expected else f"NOT as expected: {row.cause}"
        print(
            f"{row.task_id}: reference {'passes' if row.reference_passes else 'FAILS'}, "
            f"empty {'fails' if row.empty_fails else 'PASSES'} ({verdict}; {row.seconds:.0f} s)"
        )
        for note in row.notes:
            print(f"    note: {note}")
        if row.detail:
            print(f"    detail: {row.detail}")
    if any(r.cause == "refused" for r in rows):
        return 2  # a malformed or hostile task folder: the user's error (docs/cli.md)
    return 0 if rows and all(r.as_expected for r in rows) else 1
