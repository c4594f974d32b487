"""Single-turn AST entries as episodes: schema feedback, the final AST check, the oracle.

A reply whose calls are well formed against the function docs (known names, keyword arguments
only, no unknown parameter, every required parameter given) is the agent's final answer and is
scored by :func:`~multiturn_envs.envs.bfcl.ast_checker.check_single_turn`. A reply that breaks
the schema gets the reason back and costs a turn, but does not end the episode: with a budget of
one reply this is exactly BFCL's one-shot evaluation; larger budgets allow a retry after the
schema feedback (our operationalisation of an interactive single-turn task). A reply without calls
is final too (the right answer for the irrelevance categories).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from multiturn_envs.envs.bfcl.calls import Call, render_calls
from multiturn_envs.envs.bfcl.data import SingleTurnEntry

NO_CALL_REPLY = "None of the given functions can be used for this request."
_PLACEHOLDER: dict[str, Any] = {
    "string": "example",
    "integer": 1,
    "float": 1.0,
    "boolean": True,
    "array": [],
    "tuple": [],
    "dict": {},
    "any": "example",
}


def schema_problem(entry: SingleTurnEntry, calls: tuple[Call, ...]) -> str | None:
    """Why ``calls`` do not fit the entry's function docs, or ``None`` when they do."""
    docs = {f["name"]: f for f in entry.functions}
    for call in calls:
        doc = docs.get(call.name)
        if doc is None:
            return f"{call.name!r} is not one of the functions you were given ({', '.join(docs)})"
        if call.args:
            return f"{call.name}: pass arguments by name (param=value); positional ones are ignored"
        properties = doc["parameters"].get("properties", {})
        for key in call.kwargs:
            if key not in properties:
                return f"{call.name}: it has no parameter {key!r} ({', '.join(properties)})"
        for key in doc["parameters"].get("required", []):
            if key not in call.kwargs:
                return f"{call.name}: the required parameter {key!r} is missing"
    return None


def expert_calls(entry: SingleTurnEntry) -> list[Call]:
    """A passing answer: the first allowed option of every parameter (omitted when optional)."""
    if entry.ground_truth is None:
        if "irrelevance" in entry.category:
            return []
        return [_placeholder_call(entry.functions[0])]
    calls = []
    for expected in entry.ground_truth:
        name, options_by_param = next(iter(expected.items()))
        kwargs = {}
        for param, options in options_by_param.items():
            picked = _first(options)
            if picked is not _OMIT:
                kwargs[param] = picked
        calls.append(Call(name, (), kwargs))
    return calls


def expert_reply(entry: SingleTurnEntry) -> str:
    calls = expert_calls(entry)
    return render_calls(calls) if calls else NO_CALL_REPLY


def error_reply(entry: SingleTurnEntry, rng: np.random.Generator) -> str:
    """A plausible wrong call that the schema feedback refuses (so the episode goes on)."""
    function = entry.functions[int(rng.integers(len(entry.functions)))]
    required = function["parameters"].get("required", [])
    call = _placeholder_call(function)
    if required:
        drop = required[int(rng.integers(len(required)))]
        kwargs = {k: v for k, v in call.kwargs.items() if k != drop}
    else:
        kwargs = {**call.kwargs, "unknown_parameter": "value"}
    return render_calls([Call(call.name, (), kwargs)])


_OMIT = object()


def _first(options: list[Any]) -> Any:
    if not options or options[0] == "":
        return _OMIT
    return _pick(options[0])


def _pick(option: Any) -> Any:
    if isinstance(option, dict):  # a candidate dict: each key holds its own options
        out = {}
        for key, values in option.items():
            value = _first(values) if isinstance(values, list) else values
            if value is not _OMIT:
                out[key] = value
        return out
    if isinstance(option, list):
        return [_pick(item) if isinstance(item, dict) else item for item in option]
    return option


def _placeholder_call(function: dict[str, Any]) -> Call:
    properties = function["parameters"].get("properties", {})
    kwargs = {}
    for key in function["parameters"].get("required", []):
        detail = properties.get(key, {})
        if detail.get("enum"):
            kwargs[key] = detail["enum"][0]
        else:
            kwargs[key] = _PLACEHOLDER.get(detail.get("type", "string"), "example")
    return Call(function["name"], (), kwargs)
