"""The ASGI app: OpenEnv's routes for one MT env id, plus HTTP sessions, behind a bearer token.

Routes (OpenEnv 0.10's, ``openenv/core/env_server/http_server.py``):

* ``WS /ws``: one session (one env) per connection. Client frames ``{"type": "reset", "data":
  {...}}``, ``{"type": "step", "data": {"text": ...}}`` (or an MCP action, ``{"type":
  "call_tool", ...}``: an env tool call is a turn), ``{"type": "state"}``, ``{"type":
  "close"}``, and current OpenEnv's ``{"type": "mcp", "data": <JSON-RPC 2.0 request>}``
  (``tools/list``, ``tools/call``; answered by a ``{"type": "mcp", "data": <JSON-RPC
  response>}`` frame); server frames ``{"type": "observation" | "state" | "mcp" | "error",
  "data": ...}``. A
  per-message error leaves the socket open (as in OpenEnv), except when the session itself was
  closed (a crash or a timeout). ``/ws?session_id=ID`` attaches to a session made over HTTP, as
  OpenEnv's ``session_id`` query does.
* ``GET /health`` (never needs the token), ``/metadata``, ``/schema``, ``/state``; ``POST
  /reset`` and ``/step``. OpenEnv's HTTP ``/reset`` and ``/step`` are stateless (a fresh env per
  call): ``/reset`` works so, ``/step`` answers ``409 RESET_NEEDED`` with a pointer to ``/ws``
  instead of OpenEnv's bare 500.

``POST /mcp``: OpenEnv's JSON-RPC (``openenv/session/create``/``close``, ``tools/list``,
``tools/call`` with ``session_id``), what OpenEnv's ``MCPToolClient`` speaks in production
mode. ``tools/list`` lists the env's own tools (without a ``session_id``: those of a fresh
env); calling one is an env turn (:mod:`.session` has the two kinds of tools).

Ours: ``POST /sessions`` (a session without a socket), ``POST /sessions/{id}/reset``, ``POST
/sessions/{id}/step`` (body: OpenEnv's ``StepRequest``, ``{"action": {...}}``), ``GET
/sessions/{id}/state``, ``DELETE /sessions/{id}``, and ``GET /stats``. HTTP errors are
``{"detail": message, "code": CODE}`` with the status in :data:`protocol.HTTP_STATUS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
from collections.abc import AsyncIterator, Callable
from typing import Any

import gymnasium as gym
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from multiturn_envs.server import protocol as p
from multiturn_envs.server.manager import Session, SessionManager
from multiturn_envs.server.worker import (
    Isolation,
    blocks_on_io,
    make_registered,
    prepare,
    resolve_isolation,
)

OPEN_PATHS = frozenset({"/health"})
"""Paths answered without the token (liveness probes)."""

# the socket survives these; a crash, a timeout or a closed session ends it
_FATAL = frozenset({p.EXECUTION_ERROR, p.TIMEOUT, p.SESSION_ERROR})


class JSONText(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return p.dumps(content).encode("utf-8")


class RawJSON(Response):
    """A body that is JSON text already (an env's reply, passed through unparsed)."""

    media_type = "application/json"


def _client(conn: Request | WebSocket) -> str:
    """The client's address (the socket's peer: forwarded headers are not trusted)."""
    return conn.client.host if conn.client is not None else ""


def _error(exc: p.ProtocolError) -> Response:
    return JSONText({"detail": exc.message, "code": exc.code}, status_code=exc.http_status)


class BearerAuth:
    """Require ``Authorization: Bearer <token>`` on every HTTP request and WebSocket handshake."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        response = _error(p.ProtocolError(p.UNAUTHORIZED, "a valid bearer token is required"))
        await response(scope, receive, send)


async def _read_json(
    request: Request, limits: p.ServerLimits, *, empty_ok: bool = False
) -> dict[str, Any]:
    """The request's JSON object, read within the size, depth and time limits."""
    limit = limits.max_request_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise p.ProtocolError(p.TOO_LARGE, f"the body is over {limit} bytes")
    body = bytearray()

    async def read() -> None:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > limit:
                raise p.ProtocolError(p.TOO_LARGE, f"the body is over {limit} bytes")

    try:
        await asyncio.wait_for(read(), limits.handshake_timeout_s)
    except asyncio.TimeoutError:
        raise p.ProtocolError(
            p.TIMEOUT, f"the body did not arrive within {limits.handshake_timeout_s:g} s"
        ) from None
    if not body.strip() and empty_ok:
        return {}
    return p.loads_object(bytes(body), limits.max_json_depth)


def create_app(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    limits: p.ServerLimits | None = None,
    token: str | None = None,
    make_env: Callable[[], gym.Env[str, str]] | None = None,
    isolation: Isolation = "auto",
    connection_stats: Callable[[], dict[str, int]] | None = None,
) -> ASGIApp:
    """The app serving ``env_id`` (each session: ``gym.make(env_id, **env_kwargs)``).

    Args:
        env_id: a registered id (``import multiturn_envs`` registers the MT/* ids).
        env_kwargs: ``gym.make`` keyword arguments for every session's env.
        limits: sessions, sizes and timeouts
            (:class:`~multiturn_envs.server.protocol.ServerLimits`).
        token: when set, every request but ``/health`` needs ``Authorization: Bearer <token>``.
        make_env: builds one env instead of ``gym.make`` (custom wrappers); unless
            ``isolation="thread"`` it must pickle (a module-level function or class, or a
            ``functools.partial`` of one).
        isolation: ``"pool"``: sessions' envs in a few worker processes (``limits.
            pool_workers``), a call that overruns its timeout stopped with its worker and the
            worker's other sessions moved (:mod:`~multiturn_envs.server.pool`);
            ``"process"``: a worker process per session; ``"thread"``: on threads of this
            process (:mod:`~multiturn_envs.server.worker`); ``"auto"`` (default): ``"pool"``,
            or ``"process"`` for an env with ``blocking_io`` (one env is built here to see).
        connection_stats: more numbers for ``GET /stats`` (the connection guard's).
    """
    import multiturn_envs  # noqa: F401  (registers the MT/* ids)

    kwargs = dict(env_kwargs or {})
    limits = limits or p.ServerLimits()
    factory = make_env or functools.partial(make_registered, env_id, kwargs)
    if isolation == "auto":
        isolation = resolve_isolation(isolation, blocks_on_io(factory))
    manager = SessionManager(factory, env_id, limits, isolation)

    async def health(request: Request) -> Response:
        return JSONText({"status": "healthy"})

    async def metadata(request: Request) -> Response:
        from multiturn_envs import __version__

        return JSONText(
            {
                "name": env_id,
                "description": (
                    f"{env_id} from multiturn-envs: a multi-turn text env with a turn budget and "
                    "an exact step-level oracle (step_score in metadata); the env's actions as "
                    "MCP tools (list_tools / call_tool: a call is a turn); oracle hooks and "
                    "snapshots callable as tools by name (describe)"
                ),
                "readme_content": None,
                "version": __version__,
                "author": None,
                "documentation_url": None,
            }
        )

    async def schema(request: Request) -> Response:
        return JSONText(
            {
                "action": p.ACTION_SCHEMA,
                "observation": p.OBSERVATION_SCHEMA,
                "state": p.STATE_SCHEMA,
            }
        )

    async def stats(request: Request) -> Response:
        extra = connection_stats() if connection_stats is not None else {}
        return JSONText({"env_id": env_id, **manager.stats(), **extra})

    async def stateless_state(request: Request) -> Response:
        return JSONText({"episode_id": None, "step_count": 0})

    async def stateless_reset(request: Request) -> Response:
        try:
            data = await _read_json(request, limits, empty_ok=True)
            session = await manager.create(_client(request))
            try:
                payload = await manager.run(session, "reset", data)
            finally:
                await manager.close(session, "stateless /reset")
        except p.ProtocolError as exc:
            return _error(exc)
        return RawJSON(payload)

    async def stateless_step(request: Request) -> Response:
        return _error(
            p.ProtocolError(
                p.RESET_NEEDED,
                "HTTP /step has no episode in OpenEnv's protocol (each call gets a fresh env): "
                "use the WebSocket session at /ws, or POST /sessions then /sessions/{id}/step",
            )
        )

    async def new_session(request: Request) -> Response:
        try:
            await _read_json(request, limits, empty_ok=True)
            session = await manager.create(_client(request))
        except p.ProtocolError as exc:
            return _error(exc)
        return JSONText({"session_id": session.id}, status_code=201)

    async def session_op(request: Request) -> Response:
        op = request.path_params["op"]
        try:
            session = manager.get(request.path_params["session_id"])
            if op == "state" and request.method == "GET":
                return RawJSON(await manager.run(session, "state"))
            if request.method != "POST" or op not in ("reset", "step"):
                raise p.ProtocolError(p.UNKNOWN_TYPE, f"no operation {request.method} {op[:50]!r}")
            body = await _read_json(request, limits, empty_ok=op == "reset")
            if op == "reset":
                payload = await manager.run(session, "reset", body)
            else:
                if "action" not in body:
                    raise p.ProtocolError(p.VALIDATION_ERROR, "the body is {'action': {...}}")
                payload = await manager.run(session, "step", body["action"])
        except p.ProtocolError as exc:
            return _error(exc)
        return RawJSON(payload)

    async def delete_session(request: Request) -> Response:
        try:
            session = manager.get(request.path_params["session_id"])
        except p.ProtocolError as exc:
            return _error(exc)
        await manager.close(session, "closed by the client")
        return JSONText({"session_id": session.id, "closed": True})

    async def mcp(request: Request) -> Response:
        """OpenEnv's HTTP MCP endpoint (what ``MCPToolClient`` uses): JSON-RPC 2.0."""
        request_id: Any = None
        try:
            body = await _read_json(request, limits)
            request_id = body.get("id")
            method, params = body.get("method"), body.get("params", {})
            if not isinstance(params, dict):
                return _rpc_error(request_id, -32602, "params must be an object")
            if method == "openenv/session/create":
                session = await manager.create(_client(request))
                return _rpc(request_id, {"session_id": session.id})
            if method == "tools/list" and not params.get("session_id"):
                fresh = await manager.create(_client(request))  # OpenEnv lists a fresh env's
                try:  # tools too
                    return RawJSON(await manager.run(fresh, "rpc", body))
                finally:
                    await manager.close(fresh, "tools/list without a session")
            if method not in ("tools/list", "tools/call", "openenv/session/close"):
                return _rpc_error(request_id, -32601, f"method not found: {str(method)[:80]}")
            session = manager.get(str(params.get("session_id", "")))
            if method == "openenv/session/close":
                await manager.close(session, "closed by the client")
                return _rpc(request_id, {"session_id": session.id, "closed": True})
            return RawJSON(await manager.run(session, "rpc", body))
        except p.ProtocolError as exc:  # an oracle hook refusing comes as EXECUTION_ERROR
            code = -32700 if exc.code == p.INVALID_JSON else -32000
            return _rpc_error(request_id, code, exc.message, exc.code)

    async def websocket(ws: WebSocket) -> None:
        await ws.accept()
        attach = ws.query_params.get("session_id")
        try:
            session = manager.get(attach) if attach else await manager.create(_client(ws))
            if attach and session.on_close is not None:
                raise p.ProtocolError(p.SESSION_ERROR, "the session already has a WebSocket")
        except p.ProtocolError as exc:
            await ws.send_text(p.dumps(exc.payload()))
            await ws.close(code=1013 if exc.code == p.CAPACITY_REACHED else 1008)
            return

        async def on_close(reason: str) -> None:
            await ws.close(code=1001, reason=reason[:120])

        session.on_close = on_close
        try:
            await _serve_socket(ws, session)
        except WebSocketDisconnect:
            pass
        finally:
            session.on_close = None
            if not attach:
                await manager.close(session, "the client disconnected")
            with contextlib.suppress(Exception):
                await ws.close()

    async def _serve_socket(ws: WebSocket, session: Session) -> None:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None:
                raw = (message.get("bytes") or b"").decode("utf-8", "replace")
            try:
                if len(raw) > limits.max_request_bytes:
                    raise p.ProtocolError(
                        p.TOO_LARGE, f"the message is over {limits.max_request_bytes} bytes"
                    )
                frame = p.loads_object(raw, limits.max_json_depth)
                kind = frame.get("type")
                data = frame.get("data", {})
                if kind == "close":
                    return
                if kind == "reset":
                    if not isinstance(data, dict):
                        raise p.ProtocolError(p.VALIDATION_ERROR, "reset data must be an object")
                    reply = _frame("observation", await manager.run(session, "reset", data))
                elif kind == "step":
                    if "data" not in frame:
                        raise p.ProtocolError(p.VALIDATION_ERROR, "a step message needs data")
                    reply = _frame("observation", await manager.run(session, "step", data))
                elif kind == "state":
                    reply = _frame("state", await manager.run(session, "state"))
                elif kind == "mcp":  # current OpenEnv: JSON-RPC over the session's socket
                    reply = _frame("mcp", await manager.run(session, "rpc", data))
                else:
                    raise p.ProtocolError(p.UNKNOWN_TYPE, f"Unknown message type: {str(kind)[:50]}")
            except p.ProtocolError as exc:
                await ws.send_text(p.dumps(exc.payload()))
                if exc.code in _FATAL:
                    return
                continue
            await ws.send_text(reply)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if isolation in ("pool", "process"):  # the fork server (serve() started it already)
            await asyncio.get_running_loop().run_in_executor(None, prepare, env_id)
        manager.start_reaper()
        try:
            yield
        finally:
            await manager.stop_reaper()
            await manager.close_all()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metadata", metadata, methods=["GET"]),
        Route("/schema", schema, methods=["GET"]),
        Route("/stats", stats, methods=["GET"]),
        Route("/state", stateless_state, methods=["GET"]),
        Route("/reset", stateless_reset, methods=["POST"]),
        Route("/step", stateless_step, methods=["POST"]),
        Route("/mcp", mcp, methods=["POST"]),
        Route("/sessions", new_session, methods=["POST"]),
        Route("/sessions/{session_id}", delete_session, methods=["DELETE"]),
        Route("/sessions/{session_id}/{op}", session_op, methods=["GET", "POST"]),
        WebSocketRoute("/ws", websocket),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.manager = manager
    return app if token is None else BearerAuth(app, token)


def _rpc(request_id: Any, result: Any) -> Response:
    return JSONText({"jsonrpc": "2.0", "id": request_id, "result": result})


def _rpc_error(request_id: Any, code: int, message: str, kind: str | None = None) -> Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if kind is not None:
        error["data"] = {"code": kind}
    return JSONText({"jsonrpc": "2.0", "id": request_id, "error": error})


def _frame(kind: str, data: str) -> str:
    """A server frame around a payload that is JSON text already."""
    return f'{{"type": "{kind}", "data": {data}}}'
