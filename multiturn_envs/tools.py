"""Typed tools: the actions an env declares as functions, and tool calls as actions.

An env declares its actions once, as tools in the OpenAI function format (:class:`Tool`: a
name, a description, a JSON schema of the arguments); :meth:`multiturn_envs.core.TextEnv.tools`
returns them. Every framework reads that one declaration: the policies render it through the
model's chat template (or send it as ``tools=`` to a server), TRL gets one typed method per
tool, verl, SkyRL and verifiers get the schemas, the server lists them over MCP.

A tool call is an action like any other, in one canonical text form, the one Hermes/Qwen-style
models emit::

    <tool_call>
    {"name": "move", "arguments": {"direction": "Right"}}
    </tool_call>

(several calls: several blocks, one after the other). Actions stay strings, so records, replay,
snapshots and every wrapper keep working, and the text forms of each env keep working too.

Parsing, without guessing (:func:`read_tool_calls`):

* an action whose first non-blank text is ``<tool_call>`` is a tool call; any other action is
  the env's text form;
* it must consist of ``<tool_call>...</tool_call>`` blocks only (blank text between them),
  each a JSON object ``{"name": str, "arguments": {...}}`` (``arguments`` may also be a JSON
  string holding that object, as OpenAI's ``tool_calls`` carry it; ``parameters`` is accepted
  as its other documented spelling);
* the name must be one of the env's tools and the arguments must satisfy its schema; an
  argument the tool does not declare is refused (a misspelt name never passes silently)
  unless the schema says ``additionalProperties`` (true or a schema) explicitly.

Anything else is a :class:`ToolCallError` whose message says exactly what is wrong; the env
shows it as the observation and the turn is spent, as for any unparseable reply. Every step is
bounded: at most :data:`MAX_CALL_CHARS` characters are read, JSON nested deeper than
:data:`MAX_DEPTH` is refused (also when ``json`` itself gives up), and no error message
echoes more than a few dozen characters of what the agent wrote.

Calls that arrive as objects (a :class:`ToolCall` a framework built from a model's output, an
OpenAI ``tool_calls`` entry) reach the env the same way: as their canonical text
(:func:`call_json`, :func:`call_from_openai`), written within the same bounds whatever their
shape or depth, so the reader refuses a bad one with the same clear observation as its text
form. The one exception is a value no model can produce (a Python object that is not JSON: a
set, bytes, a key that is not a string): that is the calling program's bug, a ``TypeError``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from multiturn_envs.safejson import JSONLimitError, check_bounds

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
MAX_CALL_CHARS = 1 << 18
"""The longest tool-call action read (256 Ki characters: a whole program fits); longer ones
are refused with a clear message, never parsed."""
MAX_DEPTH = 32
"""JSON nesting deeper than this (in a call or its arguments) is refused."""
ECHO_CHARS = 60
"""How much of an offending value an error message quotes."""

_STARTS_CALL = re.compile(r"\s*<tool_call>")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


class ToolCallError(ValueError):
    """A tool-call action the env cannot run; ``str(error)`` is the observation the agent sees."""


@dataclass(frozen=True)
class Tool:
    """One typed action of an env, as a function (the OpenAI function format).

    Attributes:
        name: the function's name (letters, digits, ``_``, ``.`` and ``-``).
        description: what calling it does, for the model.
        parameters: the JSON schema of its arguments (an ``object`` schema).
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} is not a plain identifier")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be an object schema")

    def openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {...}}``: what chat templates and servers take."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(json.dumps(self.parameters)),
            },
        }

    def mcp(self) -> dict[str, Any]:
        """MCP's (and OpenEnv's) tool listing: ``name``, ``description``, ``input_schema``."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": json.loads(json.dumps(self.parameters)),
        }

    @property
    def argument_names(self) -> list[str]:
        """The declared arguments, in schema order."""
        return list(dict(self.parameters.get("properties") or {}))


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool: its name and its arguments (a JSON object)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The canonical action text of this call (a ``<tool_call>`` block), for any name and
        arguments (:func:`call_json`)."""
        return tool_call_text([self])

    def openai(self, call_id: str | None = None) -> dict[str, Any]:
        """An assistant message's ``tool_calls`` entry (arguments as an object, as chat
        templates render them; OpenAI's wire format wants :meth:`openai_wire`)."""
        arguments = self.arguments
        entry: dict[str, Any] = {
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": dict(arguments) if isinstance(arguments, Mapping) else arguments,
            },
        }
        if call_id is not None:
            entry["id"] = call_id
        return entry

    def openai_wire(self, call_id: str) -> dict[str, Any]:
        """The entry as OpenAI's API sends it: ``arguments`` is a JSON string."""
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": json_text(self.arguments)},
        }


Action = str | ToolCall | Sequence[ToolCall]
"""What an env's ``step`` takes: text, or tool calls (turned into their canonical text)."""


def action_text(action: Action) -> str:
    """The text of an action: itself, or the canonical text of its tool calls."""
    if isinstance(action, str):
        return action
    if isinstance(action, ToolCall):
        return action.text()
    if isinstance(action, list | tuple) and action and all(isinstance(c, ToolCall) for c in action):
        return tool_call_text(list(action))
    raise TypeError(
        f"an action is a str or tool calls, got {type(action).__name__}: {action!r:.80}"
    )


def tool_call_text(calls: Sequence[ToolCall]) -> str:
    """The canonical action text of ``calls``: one ``<tool_call>`` block each."""
    if not calls:
        raise ValueError("an action needs at least one tool call")
    return "\n".join(_block(call_json(call.name, call.arguments)) for call in calls)


def _block(body: str) -> str:
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def call_json(name: Any, arguments: Any) -> str:
    """The JSON body of a call's canonical text, ``{"name": ..., "arguments": ...}``, for any
    name and arguments a caller hands over, written within the reader's bounds.

    A call the reader would accept is written whole (``json.dumps``). One it must refuse is
    written so that the reader refuses it for the same reason, at a bounded cost: containers
    nested deeper than :data:`MAX_DEPTH` are written empty past one level too many (the
    reader says "nested too deeply"; a cyclic value is just as deep), and a call longer than
    :data:`MAX_CALL_CHARS` characters is cut just past it (the reader says it is too long;
    a value that shares its parts many times over is written as the tree it stands for, only
    as far as the cut). A name or arguments of the wrong JSON type are written as they are, for
    the reader to name. Raises ``TypeError`` for a value that is not JSON at all (a set,
    bytes, an object, a non-string key that ``json`` would not write either, an integer past
    Python's 4,300-digit conversion limit): no model produces one, the program that built the
    call has a bug.
    """
    return json_text({"name": name, "arguments": arguments})


def json_text(value: Any) -> str:
    """A JSON value as text: whole when it is within the reader's bounds, else as
    :func:`call_json` describes (containers past :data:`MAX_DEPTH` written empty, the text cut
    past :data:`MAX_CALL_CHARS`); ``TypeError`` for a value that is not JSON. What a framework
    hands over as an action that is not text (TRL's ``act`` given an object) becomes this."""
    if _fits(value):
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            pass  # not JSON somewhere: the bounded writer says where
    return "".join(_bounded_chunks(value, MAX_CALL_CHARS + 1))


def within_bounds(value: Any) -> bool:
    """Whether a JSON value is within the bounds a tool call is read with: nested at most
    :data:`MAX_DEPTH` deep and at most :data:`MAX_CALL_CHARS` values (so whatever recurses on
    it, a ``json.dumps``, a deep copy, a pickle, stays far from Python's recursion limit).
    Checked without recursion, in time bounded by that many values."""
    return _fits(value)


def _fits(value: Any) -> bool:
    """Whether ``value`` is within :data:`MAX_DEPTH` and has at most :data:`MAX_CALL_CHARS`
    values (each writes at least one character), checked without recursion and without
    visiting more than that many values."""
    budget = MAX_CALL_CHARS
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > MAX_DEPTH or not isinstance(item, dict | list | tuple):
            return False
        budget -= len(children)
        if budget < 0:
            return False
        stack.extend((child, level + 1) for child in children)
    return True


def _leaf(value: Any, where: str) -> str:
    if value is None or isinstance(value, str | bool | float):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        try:
            return str(int(value))
        except ValueError:  # past sys.get_int_max_str_digits()
            raise TypeError(f"a tool call's {where} is an integer too long for JSON") from None
    raise TypeError(f"a tool call's {where} is a {type(value).__name__}, not a JSON value")


def _key(key: Any, where: str) -> str:
    if isinstance(key, str):
        return json.dumps(key, ensure_ascii=False)
    if key is None or isinstance(key, bool | int | float):  # what json.dumps writes as keys
        return json.dumps(json.dumps(key))
    raise TypeError(
        f"a tool call's {where} has a key of type {type(key).__name__}; JSON keys are strings"
    )


@dataclass
class _Open:
    """A container being written by :func:`_bounded_chunks`."""

    items: Iterator[tuple[Any, Any]]
    closer: str
    level: int
    where: str
    mapping: bool
    first: bool = True


def _bounded_chunks(value: Any, limit: int) -> Iterator[str]:
    """``value`` as JSON text in chunks, without recursion and reading each container lazily:
    containers past level ``MAX_DEPTH + 1`` are written empty, and writing stops once
    ``limit`` characters are out (every step writes at least one character, or names the
    next value, which writes one)."""
    written = 0
    opened: list[_Open] = []
    pending: tuple[Any, int, str] | None = (value, 1, "")
    while written < limit:
        if pending is not None:
            node, level, where = pending
            pending = None
            deep = level > MAX_DEPTH + 1
            if isinstance(node, Mapping):
                chunk = "{}" if deep or not node else "{"
                if chunk == "{":
                    opened.append(_Open(iter(node.items()), "}", level, where, True))
            elif isinstance(node, list | tuple):
                chunk = "[]" if deep or not node else "["
                if chunk == "[":
                    opened.append(_Open(enumerate(node), "]", level, where, False))
            else:
                chunk = _leaf(node, where)
        elif opened:
            frame = opened[-1]
            item = next(frame.items, None)
            if item is None:
                opened.pop()
                chunk = frame.closer
            else:
                key, child = item
                chunk = "" if frame.first else ", "
                frame.first = False
                if frame.mapping:
                    chunk += _key(key, frame.where) + ": "
                    path = f"{frame.where}.{str(key)[:ECHO_CHARS]}".lstrip(".")
                else:
                    path = f"{frame.where}[{key}]"
                pending = (child, frame.level + 1, path)
        else:
            return
        written += len(chunk)
        yield chunk


def is_tool_call_text(text: str) -> bool:
    """Whether ``text`` is a tool-call action (its first non-blank text is ``<tool_call>``)."""
    return _STARTS_CALL.match(text) is not None


def _echo(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return json.dumps(text[:ECHO_CHARS] + ("..." if len(text) > ECHO_CHARS else ""))


def _depth(value: Any) -> int:
    """The nesting depth of a decoded JSON value (iterative: a deep value cannot overflow)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(text: str, what: str) -> Any:
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ToolCallError(f"{what} is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise ToolCallError(f"{what} is not valid JSON ({str(exc)[:80]})") from None
    if _depth(value) > MAX_DEPTH:
        raise ToolCallError(f"{what} is nested too deeply (at most {MAX_DEPTH} levels)")
    return value


def _type_ok(value: Any, kind: str) -> bool:
    wanted = _JSON_TYPES.get(kind)
    if wanted is None:
        return True  # a type this validator does not know: accepted (schemas are the env's own)
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    if kind == "number" and isinstance(value, float) and not math.isfinite(value):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer() and math.isfinite(value)
    return isinstance(value, wanted)


def check_value(value: Any, schema: Mapping[str, Any], where: str) -> str | None:
    """Why ``value`` breaks ``schema`` (the JSON-schema keywords tools use), or ``None``.

    Checked: ``type`` (one or a list), ``enum``, ``const``, ``properties``, ``required``,
    ``additionalProperties`` (false or a schema), ``items``, ``minLength``/``maxLength``,
    ``minItems``/``maxItems``, ``minimum``/``maximum``, ``anyOf``. Other keywords
    (``description``, ``default``, ...) describe rather than constrain and are ignored.
    The caller has bounded the value's depth, so the recursion is bounded too.
    """
    kinds = schema.get("type")
    if kinds is not None:
        options = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_type_ok(value, str(k)) for k in options):
            got = "null" if value is None else type(value).__name__
            return f"{where} must be {' or '.join(map(str, options))}, got {got}"
    if "enum" in schema and value not in list(schema["enum"]):
        allowed = ", ".join(_echo(v) for v in schema["enum"])
        return f"{where} must be one of {allowed}; got {_echo(value)}"
    if "const" in schema and value != schema["const"]:
        return f"{where} must be {_echo(schema['const'])}"
    if "anyOf" in schema:
        problems = [check_value(value, s, where) for s in schema["anyOf"]]
        if all(p is not None for p in problems):
            return problems[0]
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > int(schema["maxLength"]):
            return f"{where} is {len(value)} characters; at most {schema['maxLength']}"
        if "minLength" in schema and len(value) < int(schema["minLength"]):
            return f"{where} must have at least {schema['minLength']} characters"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{where} must be >= {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{where} must be <= {schema['maximum']}"
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > int(schema["maxItems"]):
            return f"{where} has {len(value)} items; at most {schema['maxItems']}"
        if "minItems" in schema and len(value) < int(schema["minItems"]):
            return f"{where} needs at least {schema['minItems']} items"
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                problem = check_value(item, items, f"{where}[{i}]")
                if problem is not None:
                    return problem
    if isinstance(value, dict):
        props = dict(schema.get("properties") or {})
        for name in schema.get("required") or ():
            if name not in value:
                return f"{where} lacks the required {_echo(name)}"
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                problem = check_value(item, props[key], f"{where}.{key}")
            elif extra is False:
                known = ", ".join(props) or "none"
                return f"{where} has no argument {_echo(key)} (it takes: {known})"
            elif isinstance(extra, Mapping):
                problem = check_value(item, extra, f"{where}.{key}")
            else:
                problem = None
            if problem is not None:
                return problem
    return None


def _blocks(text: str, max_calls: int) -> list[str]:
    """The bodies of the ``<tool_call>`` blocks that make up ``text``; strict."""
    bodies: list[str] = []
    pos = 0
    end = len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos == end:
            return bodies
        if not text.startswith(TOOL_CALL_OPEN, pos):
            raise ToolCallError(
                f"there is text after the tool call ({_echo(text[pos:])}); a reply that calls "
                "a tool must hold only <tool_call>...</tool_call> blocks"
            )
        start = pos + len(TOOL_CALL_OPEN)
        close = text.find(TOOL_CALL_CLOSE, start)
        if close < 0:
            raise ToolCallError("the tool call is not closed: </tool_call> is missing")
        if len(bodies) == max_calls:
            many = "one call" if max_calls == 1 else f"at most {max_calls} calls"
            raise ToolCallError(f"too many tool calls in one reply: this env takes {many}")
        bodies.append(text[start:close])
        pos = close + len(TOOL_CALL_CLOSE)


def _call_of(body: str, by_name: Mapping[str, Tool], strict: bool) -> ToolCall:
    value = _loads(body.strip(), "the tool call")
    if not isinstance(value, dict):
        raise ToolCallError(
            'a tool call is a JSON object {"name": ..., "arguments": {...}}, '
            f"got {type(value).__name__}"
        )
    extra = sorted(set(value) - {"name", "arguments", "parameters"})
    if extra:
        raise ToolCallError(
            f'a tool call has only "name" and "arguments"; it has {", ".join(map(_echo, extra))}'
        )
    if "arguments" in value and "parameters" in value:
        raise ToolCallError('a tool call has "arguments" or "parameters", not both')
    name = value.get("name")
    if not isinstance(name, str):
        raise ToolCallError('a tool call needs a "name" (a string)')
    tool = by_name.get(name)
    if tool is None and strict:
        known = ", ".join(f"{t.name}({', '.join(t.argument_names)})" for t in by_name.values())
        raise ToolCallError(f"there is no tool {_echo(name)}; the tools are: {known}")
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's tool_calls carry the arguments as JSON text
        arguments = _loads(arguments, f"the arguments of {name}") if arguments.strip() else {}
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolCallError(f"the arguments of {_echo(name)} must be a JSON object")
    if tool is not None and strict:
        declared = tool.argument_names
        open_ended = tool.parameters.get("additionalProperties", False) is not False
        for key in arguments:
            if key not in declared and not open_ended:
                known = ", ".join(declared) or "none"
                raise ToolCallError(f"{name} has no argument {_echo(key)} (it takes: {known})")
        problem = check_value(arguments, tool.parameters, name)
        if problem is not None:
            raise ToolCallError(problem)
    return ToolCall(name, arguments)


def read_tool_calls(
    text: str, tools: Sequence[Tool], *, max_calls: int = 1, strict: bool = True
) -> list[ToolCall]:
    """The calls of a tool-call action, checked against ``tools``; raises :class:`ToolCallError`.

    ``text`` must be a tool-call action (:func:`is_tool_call_text`); ``max_calls`` bounds the
    calls one reply may hold (an env that takes one action per turn says 1). ``strict=False``
    reads the structure only (blocks, JSON, a name, an arguments object) and leaves names and
    argument values to the env, for envs whose own checker grades them (BFCL: a wrong argument
    type is a wrong call, scored, not an unreadable reply).
    """
    if len(text) > MAX_CALL_CHARS:
        raise ToolCallError(
            f"the tool call is {len(text)} characters; at most {MAX_CALL_CHARS} are read"
        )
    by_name = {t.name: t for t in tools}
    return [_call_of(body, by_name, strict) for body in _blocks(text, max_calls)]


def openai_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """``tools`` in the OpenAI function format (what ``apply_chat_template(tools=...)`` takes)."""
    return [t.openai() for t in tools]


def tool_from_openai(spec: Mapping[str, Any]) -> Tool:
    """A :class:`Tool` from its OpenAI function form (``{"type": "function", "function":
    {...}}``) or the bare function object."""
    function = spec.get("function", spec)
    return Tool(
        str(function["name"]),
        str(function.get("description") or ""),
        dict(function.get("parameters") or {"type": "object", "properties": {}}),
    )


def call_from_openai(entry: Any) -> ToolCall | str:
    """An OpenAI ``tool_calls`` entry (``{"type": "function", "function": {"name": ...,
    "arguments": ...}}``, the arguments a JSON string or an object) as a :class:`ToolCall`, or,
    for an entry of any other shape, as the canonical text of what it holds, for the env to
    refuse with a clear observation: arguments that are not a JSON object, or nested deeper
    than :data:`MAX_DEPTH` (checked on the string before it is decoded), are kept as written
    in a call of that name; an entry that is not an object with a ``function`` object (a
    string, a list, ``"function": "move"``, a missing key) is written whole as the call's
    body. Never raises for a JSON value (``TypeError`` for one that is not JSON at all)."""
    function = entry.get("function") if isinstance(entry, Mapping) else None
    if not isinstance(function, Mapping):
        return _block(json_text(entry))
    name = function.get("name")
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        decoded = _decoded_arguments(arguments)
        if decoded is None:
            return _block(call_json(name, arguments))
        arguments = decoded
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not isinstance(arguments, dict) or not _fits(arguments):
        return _block(call_json(name, arguments))
    return ToolCall(name, arguments)


def _decoded_arguments(text: str) -> dict[str, Any] | None:
    """A call's arguments written as JSON text, decoded when they are a JSON object within the
    reader's bounds (:data:`MAX_CALL_CHARS`, :data:`MAX_DEPTH`); else ``None``."""
    if not text.strip():
        return {}
    try:
        check_bounds(text, max_bytes=MAX_CALL_CHARS, max_depth=MAX_DEPTH)
        decoded = json.loads(text)
    except (JSONLimitError, ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, dict) else None


__all__ = [
    "ECHO_CHARS",
    "MAX_CALL_CHARS",
    "MAX_DEPTH",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "Action",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "action_text",
    "call_from_openai",
    "call_json",
    "check_value",
    "is_tool_call_text",
    "json_text",
    "openai_tools",
    "read_tool_calls",
    "tool_call_text",
    "tool_from_openai",
    "within_bounds",
]
