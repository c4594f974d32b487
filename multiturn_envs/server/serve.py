"""Run the env server: :func:`serve` (library) and :func:`main` (``multiturn-envs serve``).

``serve`` binds the socket itself (so ``port=0`` picks a free port and the chosen address is
printed before the first request can arrive), refuses a non-loopback address without a bearer
token, and hands the socket to uvicorn. On SIGINT/SIGTERM uvicorn stops accepting and the
app's shutdown closes every session's env (sandbox containers included).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from multiturn_envs.argtypes import FloatRange, IntRange
from multiturn_envs.env_args import parse_env_args
from multiturn_envs.server.protocol import Limits
from multiturn_envs.server.worker import (
    ISOLATIONS,
    Isolation,
    first_reset,
    make_registered,
    prepare,
)

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
    limits: Limits | None = None,
    isolation: Isolation = "process",
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
        limits: sessions, sizes, timeouts, connections
            (:class:`~multiturn_envs.server.protocol.Limits`; docs/security.md).
        isolation: ``"process"`` (each session's env in a worker process, stopped when a call
            overruns its timeout) or ``"thread"`` (:mod:`~multiturn_envs.server.worker`).
        log_level: uvicorn's log level.
        on_ready: called with the base URL once the socket is bound (default: print it).
    """
    try:
        import uvicorn

        from multiturn_envs.server.app import create_app
        from multiturn_envs.server.connections import ConnectionGuard, guarded_h11
    except ImportError as exc:
        raise ImportError(
            f"the env server needs the [server] extra ({exc}): pip install 'multiturn-envs[server]'"
        ) from exc

    if not is_loopback(host) and not token:
        raise ValueError(
            f"binding {host!r} exposes the envs beyond this machine: set a bearer token "
            f"(token=... or ${TOKEN_ENV}), or bind 127.0.0.1"
        )
    limits = limits or Limits()
    import multiturn_envs  # noqa: F401  (registers the MT/* ids)

    # build and reset one env now, so that a bad id or kwarg fails here and not at the first
    # session, and so that the fork server imports what a first reset imports
    lazy = first_reset(functools.partial(make_registered, env_id, dict(env_kwargs or {})))
    _raise_file_limit(limits)
    if isolation == "process":
        prepare(env_id, lazy)  # the fork server, before the address is announced
    # the longest one HTTP request may take: building an env and resetting it (stateless
    # /reset), then closing it, plus reading the body and writing the answer
    deadline = (
        2 * limits.request_timeout_s + limits.close_timeout_s + 2 * limits.handshake_timeout_s
    )
    guard = ConnectionGuard(limits, deadline)
    app = create_app(
        env_id,
        env_kwargs,
        limits=limits,
        token=token,
        isolation=isolation,
        connection_stats=guard.stats,
    )
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
        http=guarded_h11(guard),
        ws_max_size=4 * limits.max_request_bytes,  # a hard stop; the app answers TOO_LARGE below
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        limit_concurrency=None,  # the guard and the session limits bound what uvicorn did
        timeout_keep_alive=5,
        timeout_graceful_shutdown=max(1, round(limits.shutdown_timeout_s)),
        proxy_headers=False,  # a client's address is its socket's: X-Forwarded-For is not trusted
    )
    server = uvicorn.Server(config)
    (on_ready or (lambda u: print(READY_PREFIX + u, flush=True)))(url)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def _raise_file_limit(limits: Limits) -> None:
    """Raise the soft open-file limit toward what the limits can use (a socket per connection,
    two descriptors per session), as far as the hard limit allows."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    needed = limits.max_connections + 4 * limits.max_sessions + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


SECONDS = FloatRange(0.0, 10_000_000.0, low_open=True)
"""Any timeout: positive and finite (a year at most)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2), as the rest of the command line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(prog: str = "multiturn-envs serve") -> argparse.ArgumentParser:
    """The flags of ``serve``; each limit's range is checked while parsing (docs/security.md)."""
    parser = _Parser(
        prog=prog,
        description="Serve an MT env over OpenEnv's protocol (WebSocket /ws, one env per session).",
    )
    defaults = Limits()
    parser.add_argument("env_id", help="a registered id, e.g. MT/FrozenLake-v0 (or module:id)")
    parser.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="gym.make keyword argument (JSON values, else strings); repeatable",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=IntRange(0, 65535), default=8000, help="port (0: any free port)"
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token (prefer ${TOKEN_ENV}: a flag is visible to other local users)",
    )
    parser.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default="process",
        help="process: each session's env in its own process, stopped when a call overruns "
        "--request-timeout (default); thread: on a thread of the server, never stopped",
    )
    limit = parser.add_argument_group("limits (docs/security.md, 'The server')")
    limit.add_argument("--max-sessions", type=IntRange(1, 100_000), default=defaults.max_sessions)
    limit.add_argument(
        "--max-sessions-per-client",
        type=IntRange(1, 100_000),
        default=None,
        help="sessions one client address may hold (default: all but an eighth of --max-sessions)",
    )
    limit.add_argument(
        "--idle-timeout", type=SECONDS, default=defaults.idle_timeout_s, help="seconds"
    )
    limit.add_argument(
        "--request-timeout", type=SECONDS, default=defaults.request_timeout_s, help="seconds"
    )
    limit.add_argument(
        "--close-timeout",
        type=SECONDS,
        default=defaults.close_timeout_s,
        help="seconds an env may take to close before its process is killed",
    )
    limit.add_argument(
        "--max-request-bytes", type=IntRange(1024, 1 << 30), default=defaults.max_request_bytes
    )
    limit.add_argument("--max-json-depth", type=IntRange(4, 512), default=defaults.max_json_depth)
    limit.add_argument(
        "--max-observation-chars",
        type=IntRange(64, 1 << 30),
        default=defaults.max_observation_chars,
    )
    limit.add_argument(
        "--max-reply-bytes",
        type=IntRange(1 << 16, 1 << 31),
        default=defaults.max_reply_bytes,
        help="one reply of an env process",
    )
    limit.add_argument("--max-snapshots", type=IntRange(1, 100_000), default=defaults.max_snapshots)
    limit.add_argument(
        "--worker-memory-mb",
        type=IntRange(0, 1 << 24),
        default=defaults.worker_memory_bytes >> 20,
        help="address space of one env process in MiB (0: no limit)",
    )
    limit.add_argument(
        "--handshake-timeout",
        type=SECONDS,
        default=defaults.handshake_timeout_s,
        help="seconds a connection has to send a whole request",
    )
    limit.add_argument(
        "--max-connections", type=IntRange(1, 1_000_000), default=defaults.max_connections
    )
    limit.add_argument(
        "--max-connections-per-client",
        type=IntRange(1, 1_000_000),
        default=defaults.max_connections_per_client,
    )
    limit.add_argument(
        "--shutdown-timeout",
        type=SECONDS,
        default=defaults.shutdown_timeout_s,
        help="seconds SIGTERM waits for requests in flight before stopping their envs",
    )
    parser.add_argument("--log-level", default="warning")
    return parser


def limits_of(args: argparse.Namespace) -> Limits:
    """The :class:`~multiturn_envs.server.protocol.Limits` the flags describe."""
    return Limits(
        max_sessions=args.max_sessions,
        max_sessions_per_client=args.max_sessions_per_client,
        idle_timeout_s=args.idle_timeout,
        request_timeout_s=args.request_timeout,
        close_timeout_s=args.close_timeout,
        max_request_bytes=args.max_request_bytes,
        max_json_depth=args.max_json_depth,
        max_observation_chars=args.max_observation_chars,
        max_reply_bytes=args.max_reply_bytes,
        max_snapshots=args.max_snapshots,
        worker_memory_bytes=args.worker_memory_mb << 20,
        handshake_timeout_s=args.handshake_timeout,
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
        shutdown_timeout_s=args.shutdown_timeout,
    )


def _known_id(env_id: str) -> bool:
    """Whether ``env_id`` is registered, importing ``module`` first for ``module:id``."""
    import importlib

    import gymnasium as gym

    module, sep, name = env_id.partition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError:
            return False
        return name in gym.registry
    return env_id in gym.registry


def main(argv: Sequence[str] | None = None) -> int:
    """``multiturn-envs serve ENV_ID [--env-arg k=v ...]``; returns the exit status."""
    import gymnasium as gym

    import multiturn_envs

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse printed its one line (or --help)
        return int(exc.code or 0)
    try:
        env_kwargs = parse_env_args(args.env_arg)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not _known_id(args.env_id):
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
            limits=limits_of(args),
            isolation=args.isolation,
            log_level=args.log_level,
        )
    except (ValueError, TypeError, OSError, ImportError, gym.error.Error) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0
