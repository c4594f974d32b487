"""Run the env server: :func:`serve` (library) and :func:`main` (``multiturn-envs serve``).

``serve`` binds the socket itself (so ``port=0`` picks a free port and the chosen address is
printed before the first request can arrive), refuses a non-loopback address without a bearer
token, and hands the socket to uvicorn. On SIGINT/SIGTERM uvicorn stops accepting and the
app's shutdown closes every session's env (sandbox containers included).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from multiturn_envs.env_args import parse_env_args
from multiturn_envs.server.protocol import Limits

TOKEN_ENV = "MTE_SERVE_TOKEN"
"""The environment variable ``main`` reads the bearer token from (a flag shows in ``ps``)."""

READY_PREFIX = "multiturn-envs serve: listening on "
"""The line ``serve`` prints once the socket is bound: ``READY_PREFIX + base_url``."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    token: str | None = None,
    max_sessions: int = 64,
    idle_timeout_s: float = 600.0,
    request_timeout_s: float = 120.0,
    max_request_bytes: int = 1 << 20,
    max_observation_chars: int = 1 << 20,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``env_id`` over OpenEnv's protocol until interrupted (blocks).

    Args:
        env_id: a registered id; every session gets ``gym.make(env_id, **env_kwargs)``.
        env_kwargs: keyword arguments for ``gym.make`` (``max_turns`` is a session default;
            clients may set ``max_turns`` per reset).
        host: the address to bind; anything but loopback requires ``token``.
        port: the port (0: any free one; ``on_ready`` gets the URL).
        token: the bearer token clients must send (``Authorization: Bearer ...``).
        max_sessions, idle_timeout_s, request_timeout_s, max_request_bytes,
            max_observation_chars: see :class:`~multiturn_envs.server.protocol.Limits`.
        log_level: uvicorn's log level.
        on_ready: called with the base URL once the socket is bound (default: print it).
    """
    try:
        import uvicorn

        from multiturn_envs.server.app import create_app
    except ImportError as exc:
        raise ImportError(
            f"the env server needs the [server] extra ({exc}): pip install 'multiturn-envs[server]'"
        ) from exc

    if not is_loopback(host) and not token:
        raise ValueError(
            f"binding {host!r} exposes the envs beyond this machine: set a bearer token "
            f"(token=... or ${TOKEN_ENV}), or bind 127.0.0.1"
        )
    limits = Limits(
        max_sessions=max_sessions,
        idle_timeout_s=idle_timeout_s,
        request_timeout_s=request_timeout_s,
        max_request_bytes=max_request_bytes,
        max_observation_chars=max_observation_chars,
    )
    import gymnasium as gym

    import multiturn_envs  # noqa: F401  (registers the MT/* ids)

    # build one env now, so that a bad id or kwarg fails here and not at the first session
    # (envs start their heavy parts lazily, so this is cheap)
    gym.make(env_id, disable_env_checker=True, **(env_kwargs or {})).close()
    app = create_app(env_id, env_kwargs, limits=limits, token=token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound_port}"
    config = uvicorn.Config(
        app,
        log_level=log_level,
        ws_max_size=4 * max_request_bytes,  # a hard stop; the app answers TOO_LARGE below it
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        limit_concurrency=max(64, 4 * max_sessions),
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    (on_ready or (lambda u: print(READY_PREFIX + u, flush=True)))(url)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def build_parser(prog: str = "multiturn-envs serve") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve an MT env over OpenEnv's protocol (WebSocket /ws, one env per session).",
    )
    parser.add_argument("env_id", help="a registered id, e.g. MT/FrozenLake-v0")
    parser.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="gym.make keyword argument (JSON values, else strings); repeatable",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token (prefer ${TOKEN_ENV}: a flag is visible to other local users)",
    )
    parser.add_argument("--max-sessions", type=int, default=64)
    parser.add_argument("--idle-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("--request-timeout", type=float, default=120.0, help="seconds")
    parser.add_argument("--max-request-bytes", type=int, default=1 << 20)
    parser.add_argument("--max-observation-chars", type=int, default=1 << 20)
    parser.add_argument("--log-level", default="warning")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``multiturn-envs serve ENV_ID [--env-arg k=v ...]``; returns the exit status."""
    import gymnasium as gym

    import multiturn_envs

    args = build_parser().parse_args(argv)
    try:
        env_kwargs = parse_env_args(args.env_arg)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.env_id not in gym.registry:
        print(
            f"error: unknown env id {args.env_id!r}; registered MT ids: "
            f"{', '.join(multiturn_envs.env_ids())}",
            file=sys.stderr,
        )
        return 2
    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        serve(
            args.env_id,
            env_kwargs,
            args.host,
            args.port,
            token=token,
            max_sessions=args.max_sessions,
            idle_timeout_s=args.idle_timeout,
            request_timeout_s=args.request_timeout,
            max_request_bytes=args.max_request_bytes,
            max_observation_chars=args.max_observation_chars,
            log_level=args.log_level,
        )
    except (ValueError, TypeError, OSError, ImportError, gym.error.Error) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0
