"""``multiturn-envs sandbox ...``: the sandbox images.

``sandbox build|status|reap`` is the DeepCoder code sandbox (:mod:`multiturn_envs.sandbox.image`);
``sandbox terminal build|status`` is MT/Terminal-v0's shell image
(:mod:`multiturn_envs.envs.terminal.image`). Both build offline when no registry answers.
"""

from __future__ import annotations

import argparse
from typing import Any

from multiturn_envs.cli.common import Parser, user_errors
from multiturn_envs.sandbox.docker_pool import IMAGE


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
    b.add_argument("--tag", default=IMAGE, help="the image tag to build")
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
    tb.set_defaults(func=run_terminal_build)
    ts = tcmds.add_parser("status", help="say whether MT/Terminal-v0 can run (exit 0/1)")
    ts.set_defaults(func=run_terminal_status)


def run_build(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.image import build

    with user_errors(RuntimeError):
        print(f"image: {build(args.tag, args.offline)}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.docker_pool import docker_unavailable

    problem = docker_unavailable()
    print("docker sandbox: ready" if problem is None else f"docker sandbox: {problem}")
    return 0 if problem is None else 1


def run_path(args: argparse.Namespace) -> int:
    from multiturn_envs.sandbox.image import recipes_folder

    print(recipes_folder())
    return 0


def run_reap(args: argparse.Namespace) -> int:
    import docker

    from multiturn_envs.sandbox.docker_pool import reap_orphans

    removed = reap_orphans(docker.from_env())
    print(f"removed {len(removed)} orphaned sandbox container(s)")
    return 0


def run_terminal_build(args: argparse.Namespace) -> int:
    from multiturn_envs.envs.terminal.image import build

    with user_errors(RuntimeError):
        print(f"terminal image: {build(args.force)}")
    return 0


def run_terminal_status(args: argparse.Namespace) -> int:
    from multiturn_envs.envs.terminal.image import terminal_unavailable

    problem = terminal_unavailable()
    print("terminal image: ready" if problem is None else f"terminal image: {problem}")
    return 0 if problem is None else 1
