"""``multiturn-envs serve ENV_ID [...]``: an MT env over OpenEnv's protocol (docs/ecosystem.md).

The flags live here, the server in :func:`multiturn_envs.server.serve.serve` (which takes
arguments, never argv). Each limit's range is checked while parsing (docs/security.md).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from multiturn_envs.cli.argtypes import FloatRange, IntRange
from multiturn_envs.cli.common import UsageError, add_env_args, parse_env_args, use_engines

SECONDS = FloatRange(0.0, 10_000_000.0, low_open=True)
"""Any timeout: positive and finite (a year at most)."""


def add_parser(sub: Any) -> None:
    from multiturn_envs.server.protocol import ServerLimits
    from multiturn_envs.server.serve import TOKEN_ENV
    from multiturn_envs.server.worker import ISOLATIONS

    p = sub.add_parser(
        "serve",
        help="serve an env over OpenEnv's protocol (WebSocket /ws, one env per session)",
        description="""\
An MT env over OpenEnv's protocol (WebSocket /ws, one env per session, plus /health,
/metadata, /schema, /reset, /mcp and our /sessions); sessions' envs run in worker
processes (--isolation), and a call that overruns --request-timeout is stopped.
Bound to anything but loopback it requires a token. Needs the [server] extra.
docs/ecosystem.md has the protocol, docs/security.md every limit.""",
        epilog="multiturn-envs serve MT/InterCode-SQL-v0 --env-arg tasks=intercode --port 8000",
    )
    defaults = ServerLimits()
    p.add_argument("env_id", help="a registered id, e.g. MT/FrozenLake-v0 (or module:id)")
    add_env_args(p)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=IntRange(0, 65535), default=8000, help="port (0: any free port)")
    p.add_argument(
        "--token",
        default=None,
        help=f"bearer token (prefer ${TOKEN_ENV}: a flag is visible to other local users)",
    )
    p.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default="auto",
        help="pool: envs in --pool-workers processes, several sessions each; a call that "
        "overruns --request-timeout is stopped with its worker, whose other sessions move to "
        "a fresh one and are restored by replay; process: each session's env in its own "
        "process, stopped when a call overruns; thread: on threads of the server, never "
        "stopped; auto (default): pool, or process for envs that wait on containers "
        "(DeepCoder, Terminal)",
    )
    p.add_argument(
        "--pool-workers",
        type=IntRange(1, 1024),
        default=None,
        help="worker processes of --isolation pool (default: one per CPU)",
    )
    limit = p.add_argument_group("limits (docs/security.md, 'The server')")
    limit.add_argument(
        "--max-sessions",
        type=IntRange(1, 100_000),
        default=defaults.max_sessions,
        help="sessions open at once",
    )
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
        "--max-request-bytes",
        type=IntRange(1024, 1 << 30),
        default=defaults.max_request_bytes,
        help="one HTTP body or WebSocket message",
    )
    limit.add_argument(
        "--max-json-depth",
        type=IntRange(4, 512),
        default=defaults.max_json_depth,
        help="nesting of a request's JSON",
    )
    limit.add_argument(
        "--max-observation-chars",
        type=IntRange(64, 1 << 30),
        default=defaults.max_observation_chars,
        help="a longer observation is cut (head and tail kept)",
    )
    limit.add_argument(
        "--max-reply-bytes",
        type=IntRange(1 << 16, 1 << 31),
        default=defaults.max_reply_bytes,
        help="one reply of an env process",
    )
    limit.add_argument(
        "--max-snapshots",
        type=IntRange(1, 100_000),
        default=defaults.max_snapshots,
        help="snapshots kept per session (the oldest is dropped first)",
    )
    limit.add_argument(
        "--worker-memory-mb",
        type=IntRange(0, 1 << 24),
        default=defaults.worker_memory_bytes >> 20,
        help="address space of one env process in MiB (0: no limit); a pool worker gets "
        "this much per session it hosts",
    )
    limit.add_argument(
        "--max-replay-requests",
        type=IntRange(1, 10_000_000),
        default=defaults.max_replay_requests,
        help="requests that changed a pool session since its last seeded reset, kept in its "
        "replay log (reads such as tools/list, describe and state do not count); over it, the "
        "session is closed instead of moved if its worker is replaced",
    )
    limit.add_argument(
        "--max-replay-bytes",
        type=IntRange(1024, 1 << 34),
        default=defaults.max_replay_bytes,
        help="the same bound in bytes of requests",
    )
    limit.add_argument(
        "--handshake-timeout",
        type=SECONDS,
        default=defaults.handshake_timeout_s,
        help="seconds a connection has to send a whole request",
    )
    limit.add_argument(
        "--max-connections",
        type=IntRange(1, 1_000_000),
        default=defaults.max_connections,
        help="open connections, sessions or not",
    )
    limit.add_argument(
        "--max-connections-per-client",
        type=IntRange(1, 1_000_000),
        default=defaults.max_connections_per_client,
        help="open connections of one client address",
    )
    limit.add_argument(
        "--shutdown-timeout",
        type=SECONDS,
        default=defaults.shutdown_timeout_s,
        help="seconds SIGTERM waits for requests in flight before stopping their envs",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn's log level")
    p.set_defaults(func=run)


def limits_of(args: argparse.Namespace) -> Any:
    """The :class:`~multiturn_envs.server.protocol.ServerLimits` the flags describe."""
    from multiturn_envs.server.protocol import ServerLimits

    return ServerLimits(
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
        pool_workers=args.pool_workers,
        max_replay_requests=args.max_replay_requests,
        max_replay_bytes=args.max_replay_bytes,
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


def run(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import multiturn_envs
    from multiturn_envs.server.serve import TOKEN_ENV, serve

    env_kwargs = parse_env_args(args.env_arg)
    use_engines(args.engine)
    if not _known_id(args.env_id):
        raise UsageError(
            f"unknown env id {args.env_id!r}; registered MT ids: "
            f"{', '.join(multiturn_envs.env_ids())}"
        )
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
        raise UsageError(f"{type(exc).__name__}: {exc}") from None
    return 0
