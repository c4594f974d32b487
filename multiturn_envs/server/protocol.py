"""OpenEnv's wire format for MT/* envs: payloads, error codes and limits (no web framework here).

The server (:mod:`multiturn_envs.server.app`) and our client (:mod:`.remote_env`) both import
this module, so the two ends of the wire share one definition. The format is OpenEnv's
(``openenv`` 0.10, ``openenv/core/env_server``), read from its source:

* **Action** (the ``data`` of a WebSocket ``step`` message): ``{"text": str}``, plus OpenEnv's
  optional ``metadata`` dict; any other key is refused, as OpenEnv's ``Action`` does
  (``extra="forbid"``). Two more shapes are OpenEnv's MCP actions and are *not* env turns:
  ``{"type": "list_tools"}`` and ``{"type": "call_tool", "tool_name": ..., "arguments": {...}}``
  (what OpenEnv's ``MCPToolClient`` sends); they reach the oracle hooks and snapshots
  (:mod:`.tools`).
* **Observation response** (``serialize_observation`` in OpenEnv):
  ``{"observation": {"text", "terminated", "truncated", "metadata"}, "reward", "done",
  "metadata"}``. ``metadata`` is the env's ``info`` (``step_score``, ``success``, ``turn``,
  ``turns_left``, ``task_id``, ``state_key``, ...), nested and top-level as OpenEnv sends it;
  ``done`` is ``terminated or truncated`` and the split is kept in the observation.
  ``reward`` is ``None`` after a reset (OpenEnv's convention).
* **Errors**: ``{"type": "error", "data": {"message", "code"}}``. OpenEnv's codes where one fits
  (``INVALID_JSON``, ``UNKNOWN_TYPE``, ``VALIDATION_ERROR``, ``EXECUTION_ERROR``,
  ``CAPACITY_REACHED``, ``FACTORY_ERROR``, ``SESSION_ERROR``), plus ours for what OpenEnv has
  no code for (``EPISODE_OVER``, ``RESET_NEEDED``, ``TIMEOUT``, ``TOO_LARGE``,
  ``UNKNOWN_SESSION``, ``UNAUTHORIZED``, ``CLIENT_LIMIT``). Over HTTP the same codes come with
  a status code (:data:`HTTP_STATUS`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from multiturn_envs.deprecation import renamed_attribute
from multiturn_envs.safejson import JSONLimitError, loads_bounded

ACTION_FIELD = "text"
"""The one field of an action: the agent's reply, verbatim."""

INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
FACTORY_ERROR = "FACTORY_ERROR"
SESSION_ERROR = "SESSION_ERROR"
EPISODE_OVER = "EPISODE_OVER"
RESET_NEEDED = "RESET_NEEDED"
TIMEOUT = "TIMEOUT"
TOO_LARGE = "TOO_LARGE"
UNKNOWN_SESSION = "UNKNOWN_SESSION"
UNAUTHORIZED = "UNAUTHORIZED"
CLIENT_LIMIT = "CLIENT_LIMIT"

HTTP_STATUS: dict[str, int] = {
    INVALID_JSON: 400,
    UNKNOWN_TYPE: 400,
    VALIDATION_ERROR: 422,
    EXECUTION_ERROR: 500,
    CAPACITY_REACHED: 503,
    FACTORY_ERROR: 500,
    SESSION_ERROR: 410,
    EPISODE_OVER: 409,
    RESET_NEEDED: 409,
    TIMEOUT: 504,
    TOO_LARGE: 413,
    UNKNOWN_SESSION: 404,
    UNAUTHORIZED: 401,
    CLIENT_LIMIT: 429,
}
"""The HTTP status of each error code (the WebSocket carries the code alone)."""

RESET_KEYS = frozenset(
    {
        "seed",
        "episode_id",
        "task_id",
        "options",
        "max_turns",
        "budget_mode",
        "error_after",
        "reward",
        "expert_in_metadata",
    }
)
"""What a reset understands; OpenEnv's server drops keys its env's ``reset`` does not take, and
so do we, listing them in ``metadata["ignored_reset_keys"]``."""


class ProtocolError(Exception):
    """A request the server answers with an error payload instead of a result.

    Attributes:
        code: one of the codes above.
        message: what went wrong, for a person.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    def payload(self) -> dict[str, Any]:
        """OpenEnv's ``WSErrorResponse`` shape."""
        return {"type": "error", "data": {"message": self.message, "code": self.code}}


@dataclass(frozen=True)
class ServerLimits:
    """What one server process allows. Every field bounds a resource a client could exhaust;
    docs/security.md ("The server") says what a client sees at each limit.

    Attributes:
        max_sessions: live sessions (each one env, sandbox containers included, in a worker
            process of the pool or of its own); past it, ``CAPACITY_REACHED``.
        max_sessions_per_client: live sessions of one client address; past it,
            ``CLIENT_LIMIT``. ``None``: all but an eighth of ``max_sessions`` (at least one
            slot stays free for other clients; 56 of 64). Closing sessions count until their
            env is gone.
        idle_timeout_s: a session with no request for this long is closed (its env too).
        request_timeout_s: one reset, step or tool call (building the env included); past
            it the client gets ``TIMEOUT``, the env process is stopped and the session closed.
        close_timeout_s: how long an env may take to close (and a stopped one to wind down)
            before its process is killed.
        max_request_bytes: one HTTP body or WebSocket message (``TOO_LARGE`` above it; the
            socket closes with code 1009 above four times it).
        max_json_depth: nesting of a request's JSON (``INVALID_JSON`` deeper; checked
            before parsing).
        max_observation_chars: an observation longer than this is cut (head and tail kept)
            and ``metadata["observation_cut"]`` gives the original length.
        max_reply_bytes: one reply of an env process (a tool's result: ``TOO_LARGE``; a reset
            or step: the session is closed, since the env moved on without the client).
        max_snapshots: snapshots kept per session (the oldest is dropped first).
        worker_memory_bytes: address space of one env process (0: no limit); past it the env
            gets ``MemoryError``, which closes that session only. A pool worker
            (``isolation="pool"``) gets this much per session it hosts (at least one).
        pool_workers: worker processes of ``isolation="pool"`` (``None``: one per CPU);
            sessions are placed on the least-loaded one.
        max_replay_requests: requests a pool session's replay log keeps since its last
            seeded reset (what moving it to a fresh worker replays); a session over it is
            closed, not moved, if its worker is replaced.
        max_replay_bytes: the same bound in bytes of requests.
        handshake_timeout_s: a connection must send a whole request (headers and body) within
            this long of opening, or of its previous answer; idle and half-open sockets go.
        max_connections: HTTP connections open at once (WebSocket sessions are counted by
            ``max_sessions``); a new one past it replaces the longest-idle one, or is refused
            if none is idle.
        max_connections_per_client: the same for one client address.
        shutdown_timeout_s: on SIGTERM/SIGINT, how long requests in flight may finish before
            their envs are stopped and every session closed.
    """

    max_sessions: int = 64
    max_sessions_per_client: int | None = None
    idle_timeout_s: float = 600.0
    request_timeout_s: float = 120.0
    close_timeout_s: float = 10.0
    max_request_bytes: int = 1 << 20
    max_json_depth: int = 32
    max_observation_chars: int = 1 << 20
    max_reply_bytes: int = 16 << 20
    max_snapshots: int = 64
    worker_memory_bytes: int = 8 << 30
    pool_workers: int | None = None
    max_replay_requests: int = 1000
    max_replay_bytes: int = 4 << 20
    handshake_timeout_s: float = 10.0
    max_connections: int = 1024
    max_connections_per_client: int = 128
    shutdown_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        positive_ints = (
            "max_sessions",
            "max_request_bytes",
            "max_json_depth",
            "max_observation_chars",
            "max_reply_bytes",
            "max_snapshots",
            "max_connections",
            "max_connections_per_client",
            "max_replay_requests",
            "max_replay_bytes",
        )
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        per_client = self.max_sessions_per_client
        if per_client is not None and (
            isinstance(per_client, bool) or not isinstance(per_client, int) or per_client < 1
        ):
            raise ValueError(f"max_sessions_per_client must be a positive int, got {per_client!r}")
        workers = self.pool_workers
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
        ):
            raise ValueError(f"pool_workers must be a positive int, got {workers!r}")
        memory = self.worker_memory_bytes
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
            raise ValueError(f"worker_memory_bytes must be an int >= 0, got {memory!r}")
        for name in (
            "idle_timeout_s",
            "request_timeout_s",
            "close_timeout_s",
            "handshake_timeout_s",
            "shutdown_timeout_s",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not value > 0
                or math.isinf(value)
            ):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")

    @property
    def pool_size(self) -> int:
        """``pool_workers``, resolved (``None``: the CPUs this process may run on)."""
        if self.pool_workers is not None:
            return self.pool_workers
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):  # not Linux
            return max(1, os.cpu_count() or 1)

    @property
    def sessions_per_client(self) -> int:
        """``max_sessions_per_client``, resolved (``None``: all but an eighth, at least one)."""
        if self.max_sessions_per_client is not None:
            return min(self.max_sessions_per_client, self.max_sessions)
        return max(1, self.max_sessions - max(1, self.max_sessions // 8))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(obj: Any) -> str:
    """JSON text of a payload; numpy scalars/arrays (common in ``info``) become plain values."""
    return json.dumps(obj, default=_jsonable, ensure_ascii=False)


def loads_object(text: str | bytes, max_depth: int = 32) -> dict[str, Any]:
    """Parse one request body or message (its size already checked); anything but a JSON
    object, or one nested deeper than ``max_depth``, is ``INVALID_JSON``."""
    try:
        value = loads_bounded(text, max_bytes=len(text), max_depth=max_depth)
    except JSONLimitError as exc:
        raise ProtocolError(INVALID_JSON, f"Invalid JSON: {exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(INVALID_JSON, f"Invalid JSON: {exc}"[:500]) from None
    if not isinstance(value, dict):
        raise ProtocolError(INVALID_JSON, f"expected a JSON object, got {type(value).__name__}")
    return value


def parse_action(data: Any) -> str:
    """The agent's text from a step's ``data`` (``{"text": ...}``), or ``VALIDATION_ERROR``."""
    if not isinstance(data, dict):
        raise ProtocolError(VALIDATION_ERROR, "an action is a JSON object {'text': str}")
    extra = sorted(set(data) - {ACTION_FIELD, "metadata"})
    if extra:
        raise ProtocolError(
            VALIDATION_ERROR,
            f"unknown action fields {extra}: an action is {{'text': str}} "
            "(or an MCP list_tools / call_tool action)",
        )
    text = data.get(ACTION_FIELD)
    if not isinstance(text, str):
        raise ProtocolError(
            VALIDATION_ERROR, f"action field 'text' must be a string, got {type(text).__name__}"
        )
    if "metadata" in data and not isinstance(data["metadata"], dict):
        raise ProtocolError(VALIDATION_ERROR, "action field 'metadata' must be an object")
    return text


def cut(text: str, limit: int) -> tuple[str, int | None]:
    """``text`` within ``limit`` characters (head and tail kept), and its length when it was cut."""
    if len(text) <= limit:
        return text, None
    marker = f"\n[...{len(text)} characters cut...]\n"
    keep = max(limit - len(marker), 2)  # a limit below the marker's length keeps 1 + 1
    head, tail = (keep + 1) // 2, keep // 2
    return f"{text[:head]}{marker}{text[len(text) - tail :]}", len(text)


def observation_payload(
    text: str,
    reward: float | None,
    terminated: bool,
    truncated: bool,
    info: dict[str, Any],
    *,
    max_chars: int,
) -> dict[str, Any]:
    """OpenEnv's observation response for one reset or step of an MT env."""
    shown, cut_from = cut(text, max_chars)
    metadata = dict(info)
    if cut_from is not None:
        metadata["observation_cut"] = cut_from
    observation = {
        "text": shown,
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "metadata": metadata,
    }
    return {
        "observation": observation,
        "reward": None if reward is None else float(reward),
        "done": bool(terminated or truncated),
        "metadata": metadata,
    }


def tool_payload(
    name: str, result: Any, error: tuple[str, str] | None, done: bool
) -> dict[str, Any]:
    """OpenEnv's ``CallToolObservation`` response: ``result`` as ``{"data": ...}`` or an error.

    ``error`` is ``(error_type, message)`` with OpenEnv's ``ToolErrorType`` values
    (``invalid_args``, ``tool_not_found``, ``execution_error``, ``timeout``).
    """
    observation: dict[str, Any] = {
        "tool_name": name,
        "result": None if error is not None else {"data": result},
        "error": None if error is None else {"error_type": error[0], "message": error[1]},
    }
    return {"observation": observation, "reward": None, "done": bool(done)}


ACTION_SCHEMA: dict[str, Any] = {
    "title": "MTAction",
    "type": "object",
    "properties": {
        ACTION_FIELD: {"type": "string", "description": "the agent's reply, verbatim"},
        "metadata": {"type": "object"},
    },
    "required": [ACTION_FIELD],
    "additionalProperties": False,
}

OBSERVATION_SCHEMA: dict[str, Any] = {
    "title": "MTObservation",
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "terminated": {"type": "boolean"},
        "truncated": {"type": "boolean"},
        "done": {"type": "boolean"},
        "reward": {"type": ["number", "null"]},
        "metadata": {
            "type": "object",
            "description": "the env's info: task_id, turn, turns_left, success, step_score, ...",
        },
    },
}

STATE_SCHEMA: dict[str, Any] = {
    "title": "MTState",
    "type": "object",
    "properties": {
        "episode_id": {"type": ["string", "null"]},
        "step_count": {"type": "integer", "minimum": 0},
        "task_id": {"type": ["string", "null"]},
        "turn": {"type": "integer"},
        "turns_left": {"type": ["integer", "null"]},
        "max_turns": {"type": ["integer", "null"]},
        "done": {"type": "boolean"},
        "success": {"type": "boolean"},
    },
    "additionalProperties": True,
}


def __getattr__(name: str) -> Any:
    """Old names, read for one release (:mod:`multiturn_envs.deprecation`): ``Limits`` is
    ``ServerLimits`` (issue 33: three classes named ``Limits`` meant three things)."""
    return renamed_attribute(__name__, name, {"Limits": ServerLimits})
