"""A served MT env used as a local one: ``RemoteTextEnv``, a ``TextEnv`` whose env lives elsewhere.

The harness, the wrappers and the baselines read a :class:`~multiturn_envs.core.TextEnv`: its
``message_view()``, ``info`` keys, turn budget and oracle hooks. ``RemoteTextEnv`` is one, backed
by a WebSocket session on a ``multiturn-envs serve`` server, so ``run_eval(config, policy, out,
make_env=remote_env_factory(url))`` runs the harness against a served env and writes the same
records as in-process (tested: same seeds, same records but timings):

* ``reset``/``step`` are OpenEnv messages; the budget named in the reset options (by the
  caller or a ``TurnBudget``/``BudgetMix`` around this env), else this env's default (the
  server's), travels with each reset. The env's ``info`` is the observation's metadata.
* The chat history is kept here from what goes over the wire (the server's history is the same
  text), so ``message_view()`` costs no round trip.
* Oracle hooks (``expert_action``, ``score_action``, ``error_action``, ``play_prefix``, ...) and
  snapshots are the server's tools (:mod:`.session`). A generator passed to ``error_action`` or
  ``random_action`` travels as its PCG64 state and comes back advanced, exactly as if the env had
  drawn from it locally. ``get_state()`` returns a server-side snapshot id (valid in this
  session only), not the env's state.
* ``tools()`` are the served env's tools (MCP ``list_tools``, asked once per turn); its tool
  settings (``max_tool_calls``, ``reply_without_call``) come with ``describe``. A tool-call
  action travels as its canonical text, which the server's env reads as a local one would.
* ``spec`` is the served env's own ``EnvSpec`` (what ``gym.make`` built on the server), so records
  name the env that really ran.

Use :func:`open_remote_env` (or :func:`remote_env_factory`): it asks the server whether the env
draws its own random actions and picks the class that keeps the random baseline's draws equal
to in-process ones (the baseline checks the class's ``random_action``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.error import ResetNeeded

from multiturn_envs.core import StepOutcome, TextEnv, check_budget
from multiturn_envs.errors import EpisodeOver
from multiturn_envs.safejson import loads_bounded
from multiturn_envs.server import protocol as p
from multiturn_envs.tools import Action, Tool, action_text, tool_from_openai

MAX_MESSAGE_BYTES = 128 << 20
"""The largest server message the client accepts (OpenEnv's client allows 100 MB)."""
MAX_REPLY_DEPTH = 64
"""The deepest JSON nesting the client parses in a reply (an env's ``info`` is a few levels
deep; 64 keeps whatever recurses on what the harness keeps of it, a deep copy, a pickle to a
Ray actor, a record's ``json.dumps``, far from Python's recursion limit)."""
MAX_ERROR_CHARS = 2000
"""How much of a server's error message an exception quotes."""


class RemoteEnvError(RuntimeError):
    """The server answered with an error that has no local exception type.

    Attributes:
        code: the protocol's error code (``TIMEOUT``, ``EXECUTION_ERROR``, ...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} (code: {code})")
        self.code = code


def ws_url(base_url: str) -> str:
    """``http(s)://host:port`` (or ``ws(s)://``) to the session socket ``ws(s)://host:port/ws``."""
    url = base_url.rstrip("/")
    for old, new in (("https://", "wss://"), ("http://", "ws://")):
        if url.startswith(old):
            url = new + url[len(old) :]
    if not url.startswith(("ws://", "wss://")):
        raise ValueError(f"a server URL starts with http(s):// or ws(s)://, got {base_url!r}")
    return f"{url}/ws"


class _Connection:
    """One OpenEnv WebSocket session: send a frame, wait for its answer, raise on errors."""

    def __init__(self, base_url: str, token: str | None, timeout_s: float) -> None:
        try:
            from websockets.sync.client import connect
        except ImportError as exc:
            raise ImportError(
                f"a served env needs websockets ({exc}): pip install 'multiturn-envs[server]'"
            ) from exc

        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.timeout_s = timeout_s
        # entered as a context manager: websockets 17 deprecates the bare connection
        self.ws = connect(
            ws_url(base_url),
            additional_headers=headers,
            max_size=MAX_MESSAGE_BYTES,
            open_timeout=min(timeout_s, 30.0),
            compression=None,
        ).__enter__()
        self.closed = False

    def request(self, frame: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            self.ws.send(p.dumps(frame))
            raw = self.ws.recv(timeout=self.timeout_s)
            reply = loads_bounded(raw, max_bytes=MAX_MESSAGE_BYTES, max_depth=MAX_REPLY_DEPTH)
        except (ValueError, RecursionError) as exc:  # not JSON, or nested past the bound
            raise RemoteEnvError(
                p.SESSION_ERROR, f"the server sent a malformed reply: {exc}"[:500]
            ) from None
        except ConnectionClosed as exc:
            reason = exc.rcvd.reason if exc.rcvd is not None else "no close frame"
            raise RemoteEnvError(
                p.SESSION_ERROR, f"the server closed the session ({reason or exc})"
            ) from None
        except TimeoutError:
            raise RemoteEnvError(
                p.TIMEOUT, f"no answer from the server within {self.timeout_s:g} s"
            ) from None
        if not isinstance(reply, dict):
            raise _malformed("the reply", reply, "an object")
        if reply.get("type") == "error":
            data = _object(reply.get("data"), "an error's data")
            code = _text(data.get("code"), "an error's code")[:100]
            message = _text(data.get("message"), "an error's message")[:MAX_ERROR_CHARS]
            if code == p.EPISODE_OVER:
                raise EpisodeOver(message)
            if code == p.RESET_NEEDED:
                raise ResetNeeded(message)
            if code == p.VALIDATION_ERROR:
                raise ValueError(message)
            raise RemoteEnvError(code, message)
        payload = reply.get("data")
        if not isinstance(payload, dict):
            raise _malformed("the reply's data", payload, "an object")
        return payload

    def tool(self, name: str, **arguments: Any) -> Any:
        data = self.request(
            {
                "type": "step",
                "data": {"type": "call_tool", "tool_name": name, "arguments": arguments},
            }
        )
        observation = _object(data.get("observation"), "a tool reply's observation")
        error = observation.get("error")
        if error:
            message = _text(_object(error, "a tool error").get("message"), "a tool error's message")
            message = message[:MAX_ERROR_CHARS]
            if message.startswith(p.EPISODE_OVER):
                raise EpisodeOver(f"tool {name}: {message}")
            if message.startswith(p.RESET_NEEDED):
                raise ResetNeeded(f"tool {name}: {message}")
            raise ValueError(f"tool {name}: {message}")
        return _object(observation.get("result"), "a tool result").get("data")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):  # the server may already have closed the socket
            self.ws.send(p.dumps({"type": "close"}))
        self.ws.close()


class RemoteTextEnv(TextEnv):
    """An MT env served by ``multiturn-envs serve``, as a local ``gym.Env[str, str]``.

    Build it with :func:`open_remote_env`. Args: the open connection and the server's
    ``describe`` answer.
    """

    def __init__(self, connection: _Connection, description: dict[str, Any]) -> None:
        try:
            super().__init__(
                max_turns=description.get("default_max_turns"),
                budget_mode=description.get("default_budget_mode") or "hidden",
            )
        except ValueError as exc:
            raise RemoteEnvError(p.SESSION_ERROR, f"malformed reply: describe's {exc}") from None
        self._conn = connection
        self.description = description
        self.env_id: str = _text(description.get("env_id"), "describe's env_id")
        spec = description.get("spec")
        try:
            self.spec = EnvSpec.from_json(_text(spec, "describe's spec")) if spec else None
        except RemoteEnvError:
            raise
        except Exception as exc:  # a spec gymnasium cannot read: the server broke the wire
            raise RemoteEnvError(
                p.SESSION_ERROR, f"malformed reply: describe's spec ({type(exc).__name__})"
            ) from None
        self._last_info: dict[str, Any] = {}
        self._task_ids: list[str] | None = None
        self._system_prompt: str | None = None
        self._tool_system_prompt: str | None = None
        self._valid: tuple[bool, list[str] | None] = (False, None)
        self._tools: tuple[tuple[Any, ...], tuple[Tool, ...]] | None = None
        self.max_tool_calls = _int(description.get("max_tool_calls") or 1, "max_tool_calls", 1)
        self.reply_without_call = (
            "action" if description.get("reply_without_call") == "action" else "stop"
        )
        self.tools_change_in_episode = bool(description.get("tools_change_in_episode", True))
        self._resets = 0

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._check_free()  # an async call of this env holds it: EnvBusy (core.TextEnv)
        super(TextEnv, self).reset(seed=seed)  # gym.Env: np_random, as a local env would have
        options = dict(options or {})
        max_turns, budget_mode = check_budget(
            options.pop("max_turns", self.default_budget[0]),
            options.pop("budget_mode", self.default_budget[1]),
        )
        data: dict[str, Any] = {"max_turns": max_turns, "budget_mode": budget_mode}
        if seed is not None:
            data["seed"] = int(seed)
        if "task_id" in options:
            data["task_id"] = str(options.pop("task_id"))
        if options:
            data["options"] = options
        payload = self._conn.request({"type": "reset", "data": data})
        observation, info = self._unpack(payload)
        self._max_turns, self._budget_mode = max_turns, budget_mode
        self._task_id = info.get("task_id")
        self._turn = 0
        self._prefix_turns = 0
        self._needs_reset = False
        self._done = False
        self._success = bool(info.get("success", False))
        self._history = [{"role": "user", "content": observation}]
        self._last_observation = observation
        self._system_prompt = None
        self._tool_system_prompt = None
        self._valid = (False, None)
        self._resets += 1
        return observation, info

    def step(self, action: Action) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._check_free()
        self._require_live()
        action = action_text(action)
        payload = self._conn.request({"type": "step", "data": {p.ACTION_FIELD: action}})
        observation, info = self._unpack(payload)
        obs = _object(payload.get("observation"), "an observation")
        terminated, truncated = bool(obs.get("terminated")), bool(obs.get("truncated"))
        self._turn = _int(info.get("turn", self._turn + 1), "info's turn", 0)
        self._success = bool(info.get("success", False))
        self._done = terminated or truncated
        self._history.append({"role": "assistant", "content": action})
        self._history.append({"role": "user", "content": observation})
        self._last_observation = observation
        self._valid = (False, None)
        reward = _number(payload.get("reward") or 0.0, "the reward")
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        if not getattr(self, "_closed", False):
            self._closed = True
            self._conn.close()

    # ------------------------------------------------------------------ the contract's hooks
    def task_ids(self) -> Sequence[str]:
        if self._task_ids is None:
            ids = _list(self._conn.tool("task_ids"), "task_ids")
            self._task_ids = [_text(t, "a task id") for t in ids]
        return self._task_ids

    def system_prompt(self) -> str:
        if self._system_prompt is None:
            self._system_prompt = _text(self._conn.tool("system_prompt"), "the system prompt")
        return self._system_prompt

    def tool_system_prompt(self) -> str:
        if self._tool_system_prompt is None:
            prompt = self._conn.tool("tool_system_prompt")
            self._tool_system_prompt = _text(prompt, "the tool system prompt")
        return self._tool_system_prompt

    def valid_actions(self) -> Sequence[str] | None:
        known, actions = self._valid
        if not known:
            listed = self._conn.tool("valid_actions")
            actions = (
                None
                if listed is None
                else [_text(a, "a valid action") for a in _list(listed, "valid_actions")]
            )
            self._valid = (True, actions)
        return None if actions is None else list(actions)

    def expert_action(self) -> str:
        return _text(self._conn.tool("expert_action"), "the expert action")

    def tools(self) -> Sequence[Tool]:
        """The served env's tools now: asked once per reset, or once per turn for an env whose
        tools change within an episode (BFCL)."""
        key: tuple[Any, ...] = (self._resets, self._needs_reset)
        if self.tools_change_in_episode:
            key += (self._turn, self._prefix_turns)
        if self._tools is None or self._tools[0] != key:
            data = self._conn.request({"type": "step", "data": {"type": "list_tools"}})
            listing = _object(data.get("observation"), "the tools listing").get("tools") or []
            self._tools = (key, tuple(_tool(t) for t in _list(listing, "the tools")))
        return self._tools[1]

    def score_action(self, action: str) -> float:
        return _number(self._conn.tool("score_action", action=action), "a score")

    def error_action(self, rng: np.random.Generator) -> str:
        return self._draw("error_action", rng)

    def state_key(self) -> str:
        return str(self._last_info.get("state_key", ""))

    def play_prefix(self, action: Action) -> StepOutcome:
        action = action_text(action)
        result = _object(self._conn.tool("play_prefix", action=action), "play_prefix's result")
        observation = _text(result.get("observation"), "play_prefix's observation")
        self._prefix_turns += 1
        self._success = bool(result.get("success", False))
        self._history.append({"role": "assistant", "content": action})
        self._history.append({"role": "user", "content": observation})
        self._last_observation = observation
        self._last_info = _info(result.get("info"))
        self._valid = (False, None)
        parse_error = result.get("parse_error")
        return StepOutcome(
            observation=observation,
            reward=_number(result.get("reward", 0.0), "play_prefix's reward"),
            terminated=False,
            success=self._success,
            step_score=_number(result.get("step_score", 0.0), "play_prefix's step score"),
            parse_error=None if parse_error is None else _text(parse_error, "a parse error"),
        )

    def current_info(self) -> dict[str, Any]:
        return dict(self._last_info)

    def get_state(self) -> dict[str, Any]:
        """A snapshot *id* on the server (valid in this session), with the local counters."""
        snapshot = _object(self._conn.tool("snapshot"), "a snapshot")
        snapshot_id = _text(snapshot.get("snapshot_id"), "a snapshot id")
        return {"snapshot_id": snapshot_id, **super().get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        current = _object(
            self._conn.tool("restore", snapshot_id=state["snapshot_id"]), "restore's result"
        )
        self._last_info = _info(current.get("info"))
        self._restore_base(state)  # the counters, history and RNG live on this side
        self._valid = (False, None)

    def _get_state(self) -> Any:  # get_state above keeps the env's part on the server
        return None

    # ------------------------------------------------------------------ internals
    def _draw(self, tool: str, rng: np.random.Generator) -> str:
        state = rng.bit_generator.state
        result = _object(self._conn.tool(tool, rng_state=state), f"{tool}'s result")
        action = _text(result.get("action"), f"{tool}'s action")
        drawn: Any = result.get("rng_state")
        try:
            rng.bit_generator.state = drawn
        except Exception as exc:  # numpy refuses it: the generator is left as it was
            rng.bit_generator.state = state
            raise RemoteEnvError(
                p.SESSION_ERROR, f"malformed reply: {tool}'s rng_state ({type(exc).__name__})"
            ) from None
        return action

    def _unpack(self, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        obs = _object(payload.get("observation"), "an observation")
        text = obs.get("text")
        if not isinstance(text, str):
            raise RemoteEnvError(p.SESSION_ERROR, "the reply has no observation text")
        info = _info(payload.get("metadata") or obs.get("metadata"))
        self._last_info = info
        return text, info


def _malformed(what: str, value: Any, wanted: str) -> RemoteEnvError:
    got = "null" if value is None else type(value).__name__
    return RemoteEnvError(p.SESSION_ERROR, f"malformed reply: {what} is {got}, not {wanted}")


def _object(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a dict (``None``: empty), or ``RemoteEnvError``: the server broke the wire."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RemoteEnvError(p.SESSION_ERROR, f"malformed reply: {what} is not an object")
    return dict(value)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _malformed(what, value, "an array")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _malformed(what, value, "a string")
    return value


def _int(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value < 1 << 31:
        raise _malformed(what, value, f"an integer >= {least}")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _malformed(what, value, "a number")
    number = float(value)
    if not math.isfinite(number):
        raise _malformed(what, value, "a finite number")
    return number


INFO_TYPES: dict[str, tuple[type, ...]] = {
    "task_id": (str, type(None)),
    "turn": (int,),
    "turns_left": (int, type(None)),
    "max_turns": (int, type(None)),
    "budget_mode": (str,),
    "success": (bool,),
    "step_score": (int, float, type(None)),
    "parse_error": (bool,),
    "error_message": (str, type(None)),
    "prefix_turns": (int,),
    "state_key": (str,),
    "truncation_reason": (str, type(None)),
}
"""The types of the contract's ``info`` keys (``TextEnv._info``): what the harness, the
wrappers and the rewards read from a served env's ``info`` is checked to be what a local env
gives, so a broken server is a :class:`RemoteEnvError`, never a ``TypeError`` deep in a run."""


def _info(value: Any) -> dict[str, Any]:
    info = _object(value, "the metadata")
    for key, types in INFO_TYPES.items():
        if key in info:
            item = info[key]
            if not isinstance(item, types) or (isinstance(item, bool) and bool not in types):
                raise _malformed(f"info's {key}", item, " or ".join(t.__name__ for t in types))
            if isinstance(item, float) and not math.isfinite(item):
                raise _malformed(f"info's {key}", item, "a finite number")
    return info


def _tool(entry: Any) -> Tool:
    """One tool of the served env's listing (MCP's ``name``, ``description``,
    ``input_schema``)."""
    tool = _object(entry, "a listed tool")
    schema = tool.get("input_schema")
    description = tool.get("description")
    try:
        return tool_from_openai(
            {
                "name": _text(tool.get("name"), "a tool's name"),
                "description": None
                if description is None
                else _text(description, "a tool's description"),
                "parameters": None if schema is None else _object(schema, "a tool's input_schema"),
            }
        )
    except ValueError as exc:  # a name or schema Tool refuses
        raise RemoteEnvError(p.SESSION_ERROR, f"malformed reply: {exc}"[:500]) from None


class RemoteTextEnvOwnRandom(RemoteTextEnv):
    """A served env whose class draws its own random actions: ``random_action`` goes there too."""

    def random_action(self, rng: np.random.Generator) -> str:
        return self._draw("random_action", rng)


def open_remote_env(
    base_url: str,
    *,
    token: str | None = None,
    timeout_s: float = 300.0,
    expect_env_id: str | None = None,
) -> RemoteTextEnv:
    """Open a session on a ``multiturn-envs serve`` server (one env instance there).

    Args:
        base_url: the server's address, e.g. ``http://127.0.0.1:8000``.
        token: the server's bearer token, if it requires one.
        timeout_s: how long to wait for one answer (keep it above the server's request
            timeout, so the server's ``TIMEOUT`` error arrives first).
        expect_env_id: refuse a server that serves another env (``ValueError``): a run's
            records name its config's env id.
    """
    connection = _Connection(base_url, token, timeout_s)
    try:
        description = connection.tool("describe")
        if not isinstance(description, dict):
            raise _malformed("describe's answer", description, "an object")
        served = description.get("env_id")
        if expect_env_id is not None and served != expect_env_id:
            raise ValueError(f"{base_url} serves {served!r}, not {expect_env_id!r}")
        cls = (
            RemoteTextEnvOwnRandom if description.get("overrides_random_action") else RemoteTextEnv
        )
        return cls(connection, description)
    except BaseException:
        connection.close()
        raise


def remote_env_factory(
    base_url: str,
    *,
    token: str | None = None,
    timeout_s: float = 300.0,
    expect_env_id: str | None = None,
) -> Callable[[], RemoteTextEnv]:
    """A zero-argument env factory for ``run_eval(..., make_env=...)``: one session per call.

    ``eval --env-url URL`` is ``run_eval(config, policy, out, make_env=remote_env_factory(URL,
    token=$MTE_SERVE_TOKEN, expect_env_id=config.env_id))``.
    """

    def make() -> RemoteTextEnv:
        return open_remote_env(
            base_url, token=token, timeout_s=timeout_s, expect_env_id=expect_env_id
        )

    return make
