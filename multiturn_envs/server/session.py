"""One served env: the synchronous operations a session runs on its env (reset, step, tools).

Everything here runs on one thread for the session's life (its worker process's main thread,
or the session's own thread of the server: see :mod:`.manager`), so an env never sees two
calls at once and thread-affine resources (a sandbox pool, a SQLite connection) stay on the
thread that made them. The methods take and return plain JSON-able payloads in OpenEnv's shape
(:mod:`.protocol`); nothing here knows about HTTP or WebSockets.

Two kinds of tools, reached the way OpenEnv's MCP envs expose tools in simulation mode (a step
whose action is ``{"type": "list_tools"}`` or ``{"type": "call_tool", "tool_name",
"arguments"}``, what OpenEnv's ``MCPToolClient`` sends; or a ``{"type": "mcp"}`` JSON-RPC
frame, ``tools/list`` / ``tools/call``):

* **the env's own tools** (:meth:`~multiturn_envs.core.TextEnv.tools`: FrozenLake's ``move``,
  SQL's ``execute_sql``/``submit``, ...): calling one IS an env turn, exactly as the text action
  of its canonical ``<tool_call>`` form; the answer is OpenEnv's ``CallToolObservation`` (the
  observation text as the tool's result) with the turn's per-step ``reward``, ``done`` and the
  ``info`` as metadata. ``list_tools`` lists these, and only these: they are what an agent may
  be given;
* **the oracle hooks and snapshots** (:data:`TOOLS`): for the harness and analyses, never an
  env turn. They are callable by name but not listed, so a trainer that hands an agent every
  listed tool never hands it ``expert_action`` (``describe`` names them). An env tool of the
  same name wins.

Snapshots stay on the server (a client gets an id): a snapshot holds live env state (a
database, a sandbox's files) that a client could not hand back safely.

Replayable. :mod:`.pool` restores a session on a fresh worker by replaying its requests, so
nothing here may differ between the first run and a replay: ids (episodes, snapshots) are
keyed hashes of the request's number (``seq``, which the server sends) under a salt the server
chose for the session, so they are unguessable across sessions and identical on replay; a
first reset without a seed gets one derived from the salt (what Gymnasium would draw from the
OS instead).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from multiturn_envs.core import TextEnv, check_budget
from multiturn_envs.episode import EpisodeStart
from multiturn_envs.errors import EpisodeOver
from multiturn_envs.rewards import Outcome, Reward, Tally, Turn
from multiturn_envs.server import protocol as p
from multiturn_envs.tools import ToolCall
from multiturn_envs.wrappers.turn_budget import text_env_of

RNG_BIT_GENERATORS = ("PCG64", "PCG64DXSM")
"""Bit generators whose state is plain JSON (ints), so a client's generator can travel."""


class EnvCrashed(Exception):
    """The env raised where the contract says it never does; the session must be closed."""


def _uint(value: Any, bits: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << bits


def rng_from_state(state: Any) -> np.random.Generator:
    """A generator in exactly the state a client sent (``bit_generator.state`` of PCG64).

    Every field is checked (types and ranges) before numpy sees it, so a malformed state is a
    ``VALIDATION_ERROR`` (the tool call fails, the episode goes on), never an env crash.
    """
    inner = state.get("state") if isinstance(state, dict) else None
    if (
        not isinstance(state, dict)
        or state.get("bit_generator") not in RNG_BIT_GENERATORS
        or set(state) != {"bit_generator", "state", "has_uint32", "uinteger"}
        or not isinstance(inner, dict)
        or set(inner) != {"state", "inc"}
        or not (_uint(inner["state"], 128) and _uint(inner["inc"], 128))
        or state["has_uint32"] not in (0, 1)
        or isinstance(state["has_uint32"], bool)
        or not _uint(state["uinteger"], 32)
    ):
        raise p.ProtocolError(
            p.VALIDATION_ERROR,
            "rng_state must be the bit_generator.state of one of "
            f"{RNG_BIT_GENERATORS}: {{'bit_generator', 'state': {{'state', 'inc'}} (ints in "
            "[0, 2**128)), 'has_uint32' (0 or 1), 'uinteger' (an int in [0, 2**32))}}",
        )
    bit_generator = getattr(np.random, state["bit_generator"])()
    try:
        bit_generator.state = state
    except Exception as exc:  # whatever numpy refuses is the request's fault
        raise p.ProtocolError(p.VALIDATION_ERROR, f"invalid rng_state: {exc}"[:500]) from None
    return np.random.Generator(bit_generator)


def _overrides_random_action(base: TextEnv) -> bool:
    return type(base).random_action is not TextEnv.random_action


_STR = {"type": "string"}
_OBJ = {"type": "object"}

TOOLS: dict[str, tuple[str, dict[str, dict[str, str]]]] = {
    "describe": ("the env id, its spec, default budget and which hooks it overrides", {}),
    "task_ids": ("the ids of the tasks reset accepts as task_id", {}),
    "system_prompt": ("standing instructions for an LLM agent", {}),
    "tool_system_prompt": ("standing instructions for an agent given the env's tools", {}),
    "valid_actions": ("the env's finite set of well-formed actions, or null", {}),
    "expert_action": ("the oracle's action at the current state", {}),
    "score_action": (
        "the oracle's score in [0, 1] of an action here; no state change",
        {"action": _STR},
    ),
    "error_action": (
        "a plausible wrong action, drawn with the client's PCG64 state",
        {"rng_state": _OBJ},
    ),
    "random_action": (
        "a random well-formed action, drawn with the client's PCG64 state",
        {"rng_state": _OBJ},
    ),
    "play_prefix": ("play an action into the history without spending a turn", {"action": _STR}),
    "current": ("the last observation and the current info", {}),
    "messages": ("the episode so far as chat messages", {}),
    "snapshot": ("keep an exact snapshot of the env on the server; returns its id", {}),
    "restore": ("restore a snapshot taken in this session", {"snapshot_id": _STR}),
    "drop_snapshot": ("forget a snapshot", {"snapshot_id": _STR}),
}
"""The oracle hooks and snapshot calls, as tools: name -> (description, argument schema).
Tool ``name`` runs ``EnvSession._tool_<name>``."""

READ_ONLY_TOOLS = frozenset(TOOLS) - {"play_prefix", "snapshot", "restore", "drop_snapshot"}
"""Tools that never change the session's state (the draws use the client's generator), so a
replay (:mod:`.pool`) may leave them out."""


def tool_specs() -> list[dict[str, Any]]:
    """OpenEnv's ``Tool`` list (``name``, ``description``, ``input_schema``)."""
    return [
        {
            "name": name,
            "description": description,
            "input_schema": {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            },
        }
        for name, (description, props) in TOOLS.items()
    ]


class EnvSession:
    """One env instance behind one client session.

    Args:
        env: a made env (``gym.make(env_id, **env_kwargs)``), owned by the session from now on.
        env_id: its registered id (reported by ``describe``).
        limits: the server's limits (observation size, snapshots kept).
        salt: the key of the session's ids and of its first seed (default: random); the
            server's pool passes the same salt when it replays the session elsewhere.
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        env_id: str,
        limits: p.ServerLimits,
        salt: bytes | None = None,
    ) -> None:
        self.env = env
        self.base = text_env_of(env)
        self.env_id = env_id
        self.limits = limits
        self.default_budget = self.base.default_budget
        self.reward: Reward = Outcome()
        self.tally: Tally | None = None
        self.episode_id: str | None = None
        self.step_count = 0
        self.expert_in_metadata = False
        self.snapshots: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.salt = salt if salt is not None else secrets.token_bytes(16)
        self.seq = 0
        """The number of the request being run (the server's, or counted here)."""
        self.seeded = False
        self.start_point = False
        """Whether the last request was a reset with a seed (the client's, or the first
        one's derived seed) that succeeded: a fresh env given that reset alone is here."""
        self.changed = False
        """Whether the request being run may have changed the session's state: set before
        anything that may (a reset or a turn reaching the env, a snapshot call), so a
        request that only read (``tools/list``, ``describe``, a state read) or was refused
        before reaching the env leaves it ``False`` and a replay (:mod:`.pool`) may skip it.
        The caller clears it before each request."""

    def new_id(self, kind: str) -> str:
        """An id for ``kind`` drawn by the current request: a keyed hash of its number."""
        data = f"{kind}:{self.seq}".encode()
        return hashlib.blake2b(data, key=self.salt, digest_size=16).hexdigest()

    def _first_seed(self) -> int:
        digest = hashlib.blake2b(b"first-seed", key=self.salt, digest_size=8).digest()
        return int.from_bytes(digest, "big")

    # ------------------------------------------------------------------ OpenEnv's operations
    def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        """Start an episode. ``data``: OpenEnv's ``seed``/``episode_id``, the episode kit's
        fields (:class:`~multiturn_envs.episode.EpisodeStart`: ``task_id``, ``max_turns``,
        ``budget_mode``, ``error_after``, ``reward``), ``options`` and ``expert_in_metadata``.

        ``max_turns``/``budget_mode`` are this episode's budget (reset options: they win over
        the served env's defaults and wrappers; docs/wrappers.md; ``"max_turns": null`` asks
        for none). ``reward`` names the registered reward whose per-turn credit each step's
        ``reward`` is (a name or ``{"name": ..., **params}``; default ``"outcome"``, the env's
        own reward); with any other, the env's own reward is in ``metadata["env_reward"]``.
        ``error_after`` starts the episode in an error state (its ``metadata`` says what was
        injected)."""
        ignored = sorted(k for k in data if k not in p.RESET_KEYS)
        episode_id = data.get("episode_id")
        options = data.get("options") or {}
        try:  # checked here so the client reads the same message as a local reset's
            start = EpisodeStart.from_payload(data)
            if episode_id is not None and (
                not isinstance(episode_id, str) or len(episode_id) > 255
            ):
                raise ValueError("episode_id must be a string of <= 255")
            if not isinstance(options, dict):
                raise ValueError("options must be an object")
            options = start.options(options) or {}
            max_turns, mode = self.default_budget
            check_budget(options.get("max_turns", max_turns), options.get("budget_mode", mode))
        except (ValueError, TypeError) as exc:
            raise p.ProtocolError(p.VALIDATION_ERROR, str(exc)[:2000]) from None
        # a task id the env does not list may still be one it understands (FrozenLake's named
        # maps); if the reset then fails, it is the request's fault, not a crash
        listed = "task_id" not in options or str(options["task_id"]) in self.base.task_ids()
        reward = start.reward_or(Outcome())
        self.changed = True
        self.expert_in_metadata = bool(data.get("expert_in_metadata", False))
        seed = start.seed
        if seed is None and not self.seeded:
            seed = self._first_seed()  # what Gymnasium would draw from the OS, but replayable
        try:
            start = dataclasses.replace(start, seed=seed)
            observation, info = start.reset(self.env, options)
        except Exception as exc:
            if not listed or isinstance(exc, ValueError | KeyError | TypeError):
                raise p.ProtocolError(
                    p.VALIDATION_ERROR, f"reset refused: {type(exc).__name__}: {exc}"[:2000]
                ) from None
            raise EnvCrashed(f"reset raised {type(exc).__name__}: {exc}") from exc
        self.seeded = True
        self.start_point = seed is not None
        self.episode_id = episode_id or self.new_id("episode")
        self.step_count = 0
        self.reward = reward
        self.tally = reward.tally(info)
        if ignored:
            info["ignored_reset_keys"] = ignored
        return self._observation(observation, None, False, False, info)

    def step(self, data: Any) -> dict[str, Any]:
        """One env turn, or a tool call when ``data`` is an OpenEnv MCP action."""
        if isinstance(data, dict) and data.get("type") in ("list_tools", "call_tool"):
            return self._mcp(data)
        return self._turn(p.parse_action(data))

    def env_tools(self) -> list[dict[str, Any]]:
        """The env's own tools in MCP's listing format (the current task's)."""
        return [t.mcp() for t in self.base.tools()]

    def _is_env_tool(self, name: str) -> bool:
        return any(t.name == name for t in self.base.tools())

    def call_env_tool(self, name: str, arguments: Any) -> dict[str, Any]:
        """An env tool call as one env turn: OpenEnv's ``CallToolObservation`` shape plus the
        observation payload's fields (``text``, ``terminated``, ``truncated``, ``metadata``).

        Arguments that are not an object still make a turn: the env reads the call's text and
        says what is wrong, as it would for a model's malformed call."""
        payload = self._turn(ToolCall(name, arguments).text())  # any arguments: call_json
        observation = payload["observation"]
        observation["tool_name"] = name
        observation["result"] = {"data": observation["text"]}
        observation["error"] = None
        return payload

    def _turn(self, text: str) -> dict[str, Any]:
        self.changed = True
        try:
            observation, reward, terminated, truncated, info = self.env.step(text)
        except EpisodeOver:
            self.changed = False  # refused before anything moved (TextEnv._require_live)
            raise p.ProtocolError(
                p.EPISODE_OVER, "the episode has ended (terminated or truncated); reset first"
            ) from None
        except ResetNeeded:
            self.changed = False
            raise p.ProtocolError(p.RESET_NEEDED, "reset before the first step") from None
        except Exception as exc:  # the contract: a bad action is a turn, never an exception
            raise EnvCrashed(f"step raised {type(exc).__name__}: {exc}") from exc
        self.step_count += 1
        if self.tally is None:  # unreachable: the env refused to step before a reset
            self.tally = self.reward.tally(self.base.current_info())
        credit = self.tally.add(Turn(float(reward), info, bool(terminated), bool(truncated)))
        if not isinstance(self.reward, Outcome):
            info["env_reward"] = float(reward)
        return self._observation(observation, credit, terminated, truncated, info)

    def state(self) -> dict[str, Any]:
        """OpenEnv's ``State`` (``episode_id``, ``step_count``) plus the episode's counters."""
        base = self.base
        return {
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "env_id": self.env_id,
            "task_id": base.task_id,
            "turn": base.turn,
            "turns_left": base.turns_left,
            "max_turns": base.max_turns,
            "budget_mode": base.budget_mode,
            "done": base.done,
            "success": bool(base.current_info().get("success")) if base.task_id else False,
        }

    def close(self) -> None:
        self.snapshots.clear()
        self.env.close()

    # ------------------------------------------------------------------ tools
    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run one tool; ``ProtocolError`` for an unknown tool or bad arguments."""
        if name not in TOOLS:
            raise p.ProtocolError(p.VALIDATION_ERROR, f"unknown tool {name[:100]!r}")
        _, props = TOOLS[name]
        extra = sorted(set(arguments) - set(props))
        missing = sorted(set(props) - set(arguments))
        if extra or missing:
            raise p.ProtocolError(
                p.VALIDATION_ERROR,
                f"tool {name!r} takes {sorted(props)}; missing {missing}, unknown {extra}",
            )
        for key, schema in props.items():
            wanted = {"string": str, "object": dict}[schema["type"]]
            if not isinstance(arguments[key], wanted):
                raise p.ProtocolError(
                    p.VALIDATION_ERROR, f"{name}: {key} must be a {schema['type']}"
                )
        if name not in READ_ONLY_TOOLS:
            self.changed = True
        return getattr(self, f"_tool_{name}")(arguments)

    def _mcp(self, data: dict[str, Any]) -> dict[str, Any]:
        if data["type"] == "list_tools":
            return {"observation": {"tools": self.env_tools()}, "reward": None, "done": False}
        name = data.get("tool_name")
        arguments = data.get("arguments", {})
        if isinstance(name, str) and self._is_env_tool(name):
            return self.call_env_tool(name, arguments)
        if not isinstance(name, str) or not isinstance(arguments, dict):
            error = ("invalid_args", "call_tool needs tool_name (str) and arguments (object)")
            return p.tool_payload(str(name), None, error, False)
        try:
            result = self.call_tool(name, arguments)
        except p.ProtocolError as exc:
            kind = "tool_not_found" if name not in TOOLS else "invalid_args"
            return p.tool_payload(name, None, (kind, exc.message), self.base.done)
        except EpisodeOver as exc:
            error = ("execution_error", f"{p.EPISODE_OVER}: {exc}")
            return p.tool_payload(name, None, error, self.base.done)
        except ResetNeeded as exc:
            error = ("execution_error", f"{p.RESET_NEEDED}: {exc}")
            return p.tool_payload(name, None, error, self.base.done)
        except ValueError as exc:  # e.g. a prefix action that would end the episode
            return p.tool_payload(name, None, ("execution_error", str(exc)), self.base.done)
        except Exception as exc:
            raise EnvCrashed(f"tool {name} raised {type(exc).__name__}: {exc}") from exc
        return p.tool_payload(name, result, None, self.base.done)

    def rpc(self, request: Any) -> dict[str, Any]:
        """One MCP JSON-RPC request (a ``{"type": "mcp"}`` frame's data): ``tools/list`` (the
        env's tools) or ``tools/call`` (an env tool: a turn; a hook: its result). Returns the
        JSON-RPC response object; errors are JSON-RPC errors, the session lives on."""
        if not isinstance(request, dict):
            return _rpc_error(None, -32600, "an MCP request is a JSON-RPC 2.0 object")
        request_id = request.get("id")
        if not isinstance(request_id, str | int | None) or isinstance(request_id, bool):
            return _rpc_error(None, -32600, "id must be a string, a number or null")
        method, params = request.get("method"), request.get("params", {})
        if request.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return _rpc_error(request_id, -32600, "Invalid Request: jsonrpc '2.0' and a method")
        if not isinstance(params, dict):
            return _rpc_error(request_id, -32602, "params must be an object")
        if method == "tools/list":
            return _rpc_result(request_id, {"tools": self.env_tools()})
        if method != "tools/call":
            return _rpc_error(request_id, -32601, f"Method not found: {method[:80]}")
        name, arguments = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str):
            return _rpc_error(request_id, -32602, "Missing 'name' in params")
        if self._is_env_tool(name):
            try:
                payload = self.call_env_tool(name, arguments)
            except p.ProtocolError as exc:
                return _rpc_error(request_id, -32000, exc.message, exc.code)
            observation = payload["observation"]
            return _rpc_result(
                request_id,
                {
                    **observation,
                    "reward": payload["reward"],
                    "done": payload["done"],
                    "metadata": payload["metadata"],
                },
            )
        if not isinstance(arguments, dict):
            return _rpc_error(request_id, -32602, "arguments must be an object")
        try:
            result = self.call_tool(name, arguments)
        except p.ProtocolError as exc:
            return _rpc_error(request_id, -32602, exc.message, exc.code)
        except (EpisodeOver, ResetNeeded, ValueError) as exc:
            return _rpc_error(request_id, -32000, f"{type(exc).__name__}: {exc}"[:2000])
        except Exception as exc:
            raise EnvCrashed(f"tool {name} raised {type(exc).__name__}: {exc}") from exc
        return _rpc_result(request_id, {"data": result})

    def _live(self) -> TextEnv:
        if self.base.task_id is None:
            raise ResetNeeded("reset before using the oracle")
        if self.base.done:
            raise EpisodeOver("the episode has ended")
        return self.base

    def _tool_describe(self, arguments: dict[str, Any]) -> dict[str, Any]:
        spec = getattr(self.env, "spec", None)
        try:
            spec_json = None if spec is None else spec.to_json()
        except Exception:  # kwargs that are not JSON: the client gets no spec
            spec_json = None
        return {
            "env_id": self.env_id,
            "env_class": type(self.base).__name__,
            "spec": spec_json,
            "overrides_random_action": _overrides_random_action(self.base),
            "default_max_turns": self.default_budget[0],
            "default_budget_mode": self.default_budget[1],
            "tools": sorted(TOOLS),
            "env_tools": [t.name for t in self.base.tools()],
            "max_tool_calls": self.base.max_tool_calls,
            "tools_change_in_episode": self.base.tools_change_in_episode,
            "reply_without_call": self.base.reply_without_call,
        }

    def _tool_task_ids(self, arguments: dict[str, Any]) -> list[str]:
        return [str(t) for t in self.base.task_ids()]

    def _tool_system_prompt(self, arguments: dict[str, Any]) -> str:
        return self.base.system_prompt()

    def _tool_tool_system_prompt(self, arguments: dict[str, Any]) -> str:
        return self.base.tool_system_prompt()

    def _tool_expert_action(self, arguments: dict[str, Any]) -> str:
        return self._live().expert_action()

    def _tool_messages(self, arguments: dict[str, Any]) -> list[dict[str, str]]:
        return self.base.messages()

    def _tool_valid_actions(self, arguments: dict[str, Any]) -> list[str] | None:
        actions = self.base.valid_actions()
        return None if actions is None else list(actions)

    def _tool_score_action(self, arguments: dict[str, Any]) -> float:
        return float(self._live().score_action(arguments["action"]))

    def _with_rng(
        self, arguments: dict[str, Any], draw: Callable[[np.random.Generator], str]
    ) -> Any:
        rng = rng_from_state(arguments["rng_state"])
        action = draw(rng)
        return {"action": action, "rng_state": rng.bit_generator.state}

    def _tool_error_action(self, arguments: dict[str, Any]) -> Any:
        return self._with_rng(arguments, self._live().error_action)

    def _tool_random_action(self, arguments: dict[str, Any]) -> Any:
        return self._with_rng(arguments, self.base.random_action)

    def _tool_play_prefix(self, arguments: dict[str, Any]) -> dict[str, Any]:
        outcome = self._live().play_prefix(arguments["action"])
        return {
            **self._tool_current({}),
            "success": bool(outcome.success),
            "reward": float(outcome.reward),
            "step_score": float(outcome.step_score),
            "parse_error": outcome.parse_error,
        }

    def _tool_current(self, arguments: dict[str, Any]) -> dict[str, Any]:
        text, _ = p.cut(self.base.current_observation(), self.limits.max_observation_chars)
        return {"observation": text, "info": self.base.current_info()}

    def _tool_snapshot(self, arguments: dict[str, Any]) -> dict[str, str]:
        snapshot_id = self.new_id("snapshot")
        self.snapshots[snapshot_id] = self.base.get_state()
        while len(self.snapshots) > self.limits.max_snapshots:
            self.snapshots.popitem(last=False)
        return {"snapshot_id": snapshot_id}

    def _tool_restore(self, arguments: dict[str, Any]) -> dict[str, Any]:
        state = self.snapshots.get(arguments["snapshot_id"])
        if state is None:
            raise p.ProtocolError(
                p.VALIDATION_ERROR,
                f"unknown snapshot_id (a session keeps its last {self.limits.max_snapshots})",
            )
        self.base.set_state(state)
        return self._tool_current({})

    def _tool_drop_snapshot(self, arguments: dict[str, Any]) -> bool:
        return self.snapshots.pop(arguments["snapshot_id"], None) is not None

    # ------------------------------------------------------------------ internals
    def _observation(
        self,
        observation: str,
        reward: float | None,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> dict[str, Any]:
        if self.expert_in_metadata and not (terminated or truncated):
            info["expert_action"] = self.base.expert_action()
        return p.observation_payload(
            observation,
            reward,
            terminated,
            truncated,
            info,
            max_chars=self.limits.max_observation_chars,
        )


def _rpc_result(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _rpc_error(request_id: Any, code: int, message: str, kind: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if kind is not None:
        error["data"] = {"code": kind}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}
