"""Run the env server: :func:`serve` (the flags of ``multiturn-envs serve`` live in
:mod:`multiturn_envs.cli.serve`).

``serve`` binds the socket itself (so ``port=0`` picks a free port and the chosen address is
printed before the first request can arrive), refuses a non-loopback address without a bearer
token, and hands the socket to uvicorn. On SIGINT/SIGTERM uvicorn stops accepting and the
app's shutdown closes every session's env (sandbox containers included).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
from collections.abc import Callable
from typing import Any

from multiturn_envs.server.protocol import ServerLimits
from multiturn_envs.server.worker import (
    Isolation,
    first_reset,
    make_registered,
    prepare,
    resolve_isolation,
)

TOKEN_ENV = "MTE_SERVE_TOKEN"
"""The environment variable ``multiturn-envs serve`` reads the bearer token from (a flag shows
in ``ps``)."""

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
    limits: ServerLimits | None = None,
    isolation: Isolation = "auto",
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
            (:class:`~multiturn_envs.server.protocol.ServerLimits`; docs/security.md).
        isolation: ``"pool"`` (sessions' envs in ``limits.pool_workers`` worker processes;
            a call that overruns its timeout is stopped with its worker, whose other sessions
            are moved: :mod:`~multiturn_envs.server.pool`), ``"process"`` (a worker process
            per session), ``"thread"`` (:mod:`~multiturn_envs.server.worker`), or ``"auto"``
            (default): ``"pool"``, or ``"process"`` for an env with ``blocking_io``.
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
    limits = limits or ServerLimits()
    import multiturn_envs  # noqa: F401  (registers the MT/* ids)

    # build and reset one env now, so that a bad id or kwarg fails here and not at the first
    # session, and so that the fork server imports what a first reset imports
    make_env = functools.partial(make_registered, env_id, dict(env_kwargs or {}))
    first = first_reset(make_env)
    _raise_file_limit(limits)
    isolation = resolve_isolation(isolation, first.blocking_io)
    if isolation in ("pool", "process"):  # the fork server, before the address is announced
        prepare(env_id, first.modules, warm=make_env if first.warmable else None)
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


def _raise_file_limit(limits: ServerLimits) -> None:
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
