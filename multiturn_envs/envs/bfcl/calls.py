"""Decode an agent's reply into function calls, without ever evaluating it.

BFCL's reference harness decodes replies with ``ast`` and then ``eval``s the call string. We only
*parse*: argument values must be literals (strings, numbers, booleans, ``None``, lists, tuples,
dicts of literals), function names must be plain (optionally dotted, for BFCL's single-turn names
such as ``math.factorial``) identifiers without double underscores. Everything else (nested calls,
variable names, operators, lambdas, comprehensions, ``**kwargs``) is a clear parse error.

Two formats are accepted:

* Python-call syntax, BFCL's default: ``[cd(folder='document'), ls(a=True)]``, a bare
  ``ls(a=True)``, or ``f(), g()``;
* JSON tool calls (OpenAI style): ``{"name": "ls", "arguments": {"a": true}}``, a list of those,
  ``{"tool_calls": [{"function": {"name": ..., "arguments": "<json string>"}}]}``, or BFCL's JSON
  prompt format ``[{"function": "ls", "parameters": {...}}]``.

Code fences (```` ```json ... ``` ````) and ``<TOOLCALL>...</TOOLCALL>`` tags around either are
stripped. A reply that is neither is plain text: a message to the user, which ends the user turn.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from multiturn_envs.envs.fences import FENCE, first_pair_casefold, pairs

MAX_CALL_TEXT = 100_000
"""Replies longer than this are not parsed as calls (a clear error instead of a slow parse)."""

MAX_INT_DIGITS = 30
"""Integer literals with more digits are rejected: no backend needs them, and they invite hangs."""

MAX_VALUE_DEPTH = 32
"""Argument values nested deeper than this are rejected (BFCL's go three levels deep)."""

# What follows an opening fence (its tag and blanks), matched at one position without
# backtracking; the blocks themselves are found by :mod:`..fences` in linear time.
_FENCE_HEAD = re.compile(r"[A-Za-z0-9_-]*\s*")
_CALL_START = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\s*\(")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_JSON_CALL_KEYS = ("name", "function", "tool_calls")


class CallParseError(ValueError):
    """The reply attempts function calls but cannot be decoded; the message says why."""


@dataclass(frozen=True)
class Call:
    """One decoded function call: a name, positional and keyword arguments (all literals)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The call in Python-call syntax (``name(a=1, b='x')``); parses back to an equal call."""
        parts = [repr(a) for a in self.args]
        parts += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class Decoded:
    """What a reply decodes to: ``calls`` (empty for a plain-text reply) and the text itself."""

    calls: tuple[Call, ...]
    text: str
    format: str  # "python", "json" or "text"


def render_calls(calls: list[Call] | tuple[Call, ...]) -> str:
    """Calls as one reply in BFCL's default format: ``[f(a=1), g(b=2)]``."""
    return "[" + ", ".join(c.render() for c in calls) + "]"


def decode(reply: str) -> Decoded:
    """Decode ``reply``; raises :class:`CallParseError` for a malformed call attempt."""
    text = _unwrap(reply)
    stripped = text.strip()
    if not stripped:
        return Decoded((), reply, "text")
    looks_json = stripped[0] in "[{"
    looks_python = bool(_CALL_START.match(stripped))
    if not (looks_json or looks_python):
        return Decoded((), reply, "text")
    if len(stripped) > MAX_CALL_TEXT:
        raise CallParseError(
            f"the reply is {len(stripped)} characters long; function calls longer than "
            f"{MAX_CALL_TEXT} characters are not parsed"
        )
    if looks_json:
        parsed = _try_json(stripped)
        if parsed is not _NOT_JSON:
            if parsed == []:  # an empty call list: nothing to call, the turn ends
                return Decoded((), reply, "python")
            if _is_json_call_attempt(parsed):
                return Decoded(tuple(_json_calls(parsed)), reply, "json")
            if not looks_python:  # other JSON (an answer object, a list of numbers): text
                return Decoded((), reply, "text")
    if looks_python or stripped.startswith("["):
        return Decoded(tuple(_python_calls(stripped)), reply, "python")
    return Decoded((), reply, "text")


# ---------------------------------------------------------------------------------- unwrapping
def _unwrap(reply: str) -> str:
    """The calls inside ``<TOOLCALL>...</TOOLCALL>`` or the first fenced block, else ``reply``.

    Same result as ``re.search`` of ``<TOOLCALL>(.*?)</TOOLCALL>`` (case-insensitive) and of
    ```` ```[A-Za-z0-9_-]*\\s*\\n?(.*?)``` ````, found in linear time.
    """
    tagged = first_pair_casefold(reply, "<TOOLCALL>", "</TOOLCALL>")
    if tagged is not None:
        return reply[tagged.body : tagged.close]
    stripped = reply.strip()
    first = next(pairs(stripped, FENCE, FENCE), None)
    if first is not None and (stripped.startswith("```") or not _CALL_START.match(stripped)):
        head = _FENCE_HEAD.match(stripped, first.body, first.close)
        assert head is not None  # every part of the head is optional
        return stripped[head.end() : first.close]
    return reply


# ---------------------------------------------------------------------------------- JSON
_NOT_JSON = object()


def _try_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON
    except RecursionError:
        raise CallParseError(
            f"the reply nests JSON values too deeply (at most {MAX_VALUE_DEPTH} levels)"
        ) from None


def _is_json_call_attempt(parsed: Any) -> bool:
    items = parsed if isinstance(parsed, list) else [parsed]
    return bool(items) and all(
        isinstance(i, dict) and any(k in i for k in _JSON_CALL_KEYS) for i in items
    )


def _json_calls(parsed: Any) -> list[Call]:
    items = parsed if isinstance(parsed, list) else [parsed]
    calls: list[Call] = []
    for index, item in enumerate(items):
        if "tool_calls" in item:
            inner = item["tool_calls"]
            if not isinstance(inner, list):
                raise CallParseError("'tool_calls' must be a list of tool calls")
            calls.extend(_json_calls(inner) if inner else [])
            continue
        calls.append(_json_call(item, index))
    return calls


def _json_call(item: dict[str, Any], index: int) -> Call:
    body: Any = item
    if isinstance(item.get("function"), dict):  # OpenAI: {"type": "function", "function": {...}}
        body = item["function"]
    name = body.get("name", body.get("function"))
    if not isinstance(name, str):
        raise CallParseError(f"tool call {index}: the function name must be a string, got {name!r}")
    arguments = body.get("arguments", body.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            raise CallParseError(
                f"tool call {index} ({name}): 'arguments' is not valid JSON: {exc}"
            ) from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise CallParseError(
            f"tool call {index} ({name}): 'arguments' must be an object of named arguments"
        )
    _check_name(name)
    for key in arguments:
        _check_arg_name(name, key)
    for key, value in arguments.items():
        _check_json_value(name, key, value, 0)
    return Call(name, (), dict(arguments))


def _check_json_value(func: str, key: str, value: Any, depth: int) -> None:
    if depth > MAX_VALUE_DEPTH:
        raise CallParseError(
            f"{func}: argument {key!r} nests values more than {MAX_VALUE_DEPTH} levels deep"
        )
    if isinstance(value, bool) or value is None or isinstance(value, float | str):
        return
    if isinstance(value, int):
        if len(str(abs(value))) > MAX_INT_DIGITS:
            raise CallParseError(f"{func}: argument {key!r} is an integer with too many digits")
        return
    if isinstance(value, list):
        for v in value:
            _check_json_value(func, key, v, depth + 1)
        return
    if isinstance(value, dict):
        for v in value.values():
            _check_json_value(func, key, v, depth + 1)


# ---------------------------------------------------------------------------------- Python
def _python_calls(text: str) -> list[Call]:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CallParseError(
            f"could not parse the reply as function calls ({exc.msg}); write "
            "[func_name(param=value, ...), ...] with literal values"
        ) from None
    except (ValueError, RecursionError, MemoryError, UnicodeError) as exc:
        raise CallParseError(f"could not parse the reply as function calls: {exc}") from None
    body = tree.body
    nodes = body.elts if isinstance(body, ast.List | ast.Tuple) else [body]
    calls: list[Call] = []
    for index, node in enumerate(nodes):
        if not isinstance(node, ast.Call):
            raise CallParseError(
                f"item {index} of the reply is not a function call: "
                f"{_snippet(node)}; write [func_name(param=value, ...), ...]"
            )
        calls.append(_python_call(node))
    return calls


def _python_call(node: ast.Call) -> Call:
    name = _dotted_name(node.func)
    args: list[Any] = []
    for position, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            raise CallParseError(f"{name}: *args unpacking is not allowed")
        args.append(_literal(arg, f"{name}: positional argument {position}", 0))
    kwargs: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise CallParseError(f"{name}: **kwargs unpacking is not allowed")
        _check_arg_name(name, keyword.arg)
        if keyword.arg in kwargs:
            raise CallParseError(f"{name}: argument {keyword.arg!r} is given twice")
        kwargs[keyword.arg] = _literal(keyword.value, f"{name}: argument {keyword.arg!r}", 0)
    return Call(name, tuple(args), kwargs)


def _dotted_name(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise CallParseError(
            f"the called object {_snippet(node)} is not a function name; "
            "call functions by their plain name"
        )
    parts.append(node.id)
    name = ".".join(reversed(parts))
    _check_name(name)
    return name


def _check_name(name: str) -> None:
    if "__" in name:
        raise CallParseError(f"function name {name!r}: names with double underscores are refused")
    if not _NAME.match(name):
        raise CallParseError(f"{name!r} is not a valid function name")


def _check_arg_name(func: str, arg: str) -> None:
    if not isinstance(arg, str) or not arg.isidentifier():
        raise CallParseError(f"{func}: {arg!r} is not a valid argument name")
    if arg.startswith("__"):
        raise CallParseError(f"{func}: argument names with double underscores are refused")


def _literal(node: ast.expr, where: str, depth: int) -> Any:
    if depth > MAX_VALUE_DEPTH:
        raise CallParseError(f"{where} nests values more than {MAX_VALUE_DEPTH} levels deep")
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bytes | complex) or value is Ellipsis:
            raise CallParseError(f"{where}: {type(value).__name__} values are not allowed")
        if isinstance(value, int) and not isinstance(value, bool):
            _check_int(value, where)
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            number = operand.value
            assert isinstance(number, int | float)
            if isinstance(number, int):
                _check_int(number, where)
            return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.List):
        return [_literal(e, where, depth + 1) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e, where, depth + 1) for e in node.elts)
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for key, item in zip(node.keys, node.values):
            if key is None:
                raise CallParseError(f"{where}: ** unpacking inside a dict is not allowed")
            k = _literal(key, where, depth + 1)
            if not isinstance(k, str | int | float | bool) and k is not None:
                raise CallParseError(f"{where}: dict keys must be strings or numbers")
            out[k] = _literal(item, where, depth + 1)
        return out
    kind = _describe(node)
    raise CallParseError(
        f"{where} is {kind} ({_snippet(node)}); only literal values are allowed "
        "(strings, numbers, True/False/None, lists, tuples, dicts)"
    )


def _check_int(value: int, where: str) -> None:
    if len(str(abs(value))) > MAX_INT_DIGITS:
        raise CallParseError(f"{where}: integer literal with more than {MAX_INT_DIGITS} digits")


def _describe(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return "a nested function call"
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}, not a value"
    if isinstance(node, ast.Attribute):
        return "an attribute access"
    if isinstance(node, ast.BinOp | ast.UnaryOp | ast.BoolOp | ast.Compare):
        return "an expression with operators"
    if isinstance(node, ast.Lambda):
        return "a lambda"
    if isinstance(node, ast.JoinedStr):
        return "an f-string"
    return f"a {type(node).__name__} expression"


def _snippet(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # unparse of odd nodes: the message only needs a hint
        text = type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."
