"""BFCL's AST checker for single-turn entries (Python categories), rewritten without its imports.

Faithful to ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` (the tests compare verdicts with
the original on the real data):

* dispatch by category name: ``parallel`` -> as many calls as answers, matched in any order
  (each answer greedily takes the first unused call that passes); ``multiple`` and simple ->
  exactly one call; ``irrelevance`` passes with no call, ``live_relevance`` with at least one;
* exact function name; every ``required`` parameter present; every given parameter must be in
  the schema *and* in the possible answer; a possible-answer parameter may be omitted only if
  ``""`` is among its options;
* types: array/tuple -> list, any -> str; an int is accepted for a float; a tuple for a tuple
  parameter becomes a list; no str -> number coercion (``"10"`` and ``10.0`` fail for an
  integer); one level of nested type checking; a value of the answer's type passes even against
  another schema type (BFCL's "variable" case);
* strings compared after dropping spaces and ``,./-_*^``, lowercasing and ``'`` -> ``"``;
  lists item-wise after the same standardisation and in order; dicts key by key.

Like BFCL's decoder, only keyword arguments count; positional arguments are refused earlier,
with a clear message, by the env (BFCL would silently drop them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from multiturn_envs.envs.bfcl.calls import Call

PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
_NESTED = ("array", "tuple")
_STANDARDISE = re.compile(r"[ \,\.\/\-\_\*\^]")


@dataclass(frozen=True)
class CheckResult:
    """The verdict: ``valid``, BFCL's ``error_type`` and a readable message."""

    valid: bool
    error_type: str = ""
    message: str = ""


OK = CheckResult(True)


def check_single_turn(
    functions: Sequence[dict[str, Any]],
    calls: Sequence[Call],
    possible_answer: Sequence[dict[str, Any]] | None,
    category: str,
) -> CheckResult:
    """Score decoded ``calls`` for a single-turn entry of ``category``."""
    if "irrelevance" in category:
        if calls:
            return CheckResult(
                False,
                "irrelevance_error:decoder_success",
                "no function should be called for this request",
            )
        return OK
    if "relevance" in category:
        if not calls:
            return CheckResult(
                False, "relevance_error:decoder_failed", "a function call was expected"
            )
        return OK
    if possible_answer is None:
        raise ValueError(f"category {category!r} needs a possible answer")
    output = [{c.name: dict(c.kwargs)} for c in calls]
    if "parallel" in category:
        return _parallel(functions, output, possible_answer)
    if "multiple" in category:
        if len(output) != len(possible_answer):
            return CheckResult(
                False, "multiple_function_checker:wrong_count", "wrong number of functions"
            )
        description = _find(functions, next(iter(possible_answer[0])))
        return _simple(description, output[0], possible_answer[0])
    if len(output) != 1:
        return CheckResult(
            False, "simple_function_checker:wrong_count", "wrong number of functions"
        )
    return _simple(functions[0], output[0], possible_answer[0])


def _find(functions: Sequence[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for function in functions:
        if function["name"] == name:
            return function
    return None


def _parallel(
    functions: Sequence[dict[str, Any]],
    output: list[dict[str, dict[str, Any]]],
    possible_answers: Sequence[dict[str, Any]],
) -> CheckResult:
    if len(output) != len(possible_answers):
        return CheckResult(
            False, "parallel_function_checker_no_order:wrong_count", "wrong number of functions"
        )
    matched: set[int] = set()
    for i, answer in enumerate(possible_answers):
        description = _find(functions, next(iter(answer)))
        result = CheckResult(False)
        for index, item in enumerate(output):
            if index in matched:
                continue
            result = _simple(description, item, answer)
            if result.valid:
                matched.add(index)
                break
        if not result.valid:
            return CheckResult(
                False,
                "parallel_function_checker_no_order:cannot_find_match",
                f"no call matches expected call {i} ({next(iter(answer))}); {result.message}",
            )
    return OK


def _simple(
    description: dict[str, Any] | None, output: dict[str, dict[str, Any]], answer: dict[str, Any]
) -> CheckResult:
    if description is None:
        return CheckResult(
            False, "simple_function_checker:wrong_func_name", "expected function is not documented"
        )
    options_by_param: dict[str, list[Any]] = next(iter(answer.values()))
    name = description["name"]
    if name not in output:
        return CheckResult(
            False,
            "simple_function_checker:wrong_func_name",
            f"function {name!r} not found in the calls",
        )
    given = output[name]
    details = description["parameters"]["properties"]
    for param in description["parameters"].get("required", []):
        if param not in given:
            return CheckResult(
                False,
                "simple_function_checker:missing_required",
                f"missing required parameter {param!r}",
            )
    for param, value in given.items():
        if param not in details or param not in options_by_param:
            return CheckResult(
                False, "simple_function_checker:unexpected_param", f"unexpected parameter {param!r}"
            )
        result = _check_param(param, value, details[param], options_by_param[param])
        if not result.valid:
            return result
    for param, options in options_by_param.items():
        if param not in given and "" not in options:
            return CheckResult(
                False,
                "simple_function_checker:missing_optional",
                f"parameter {param!r} is needed here",
            )
    return OK


def _check_param(param: str, value: Any, detail: dict[str, Any], options: list[Any]) -> CheckResult:
    type_name = detail["type"]
    expected = PYTHON_TYPES[type_name]
    nested = PYTHON_TYPES[detail["items"]["type"]] if type_name in _NESTED else None
    if type_name == "tuple" and type(value) is tuple:
        value = list(value)
    if type_name == "float" and type(value) is int:
        value = float(value)
    typed = _type_check(param, value, options, type_name, expected, nested)
    if not typed.valid:
        return typed
    is_variable = typed.error_type == "variable"
    if not is_variable:
        if expected is dict:
            return _dict_check(param, value, options)
        if expected is list and nested is dict:
            return _list_dict_check(param, value, options)
        if expected is str:
            return _string_check(param, value, options)
        if expected is list:
            return _list_check(param, value, options)
    if value not in options:
        return CheckResult(
            False,
            "value_error:others",
            f"invalid value for {param!r}: {value!r}; expected one of {options}",
        )
    return OK


def _answer_type(options: Sequence[Any]) -> type | None:
    for option in options:
        if option != "":
            return type(option)
    return None


def _type_check(
    param: str,
    value: Any,
    options: Sequence[Any],
    type_name: str,
    expected: type,
    nested: type | None,
) -> CheckResult:
    answer_type = _answer_type(options)
    is_variable = answer_type is not None and answer_type != expected
    variable = CheckResult(True, "variable") if is_variable else OK
    nested_failed = False
    if type(value) is expected:
        if nested is None:
            return variable
        for option in options:
            ok = True
            if type(option) is list:
                for item in cast(list[Any], value):  # type(value) is expected: a list here
                    if not _type_check(param, item, option, str(nested), nested, None).valid:
                        ok = False
                        break
            if ok:
                return variable
        nested_failed = True
    if nested_failed:  # BFCL: a failed nested check is final, whatever the answer's type
        return CheckResult(
            False, "type_error:nested", f"nested type check failed for {param!r}: {value!r}"
        )
    if answer_type is not None and type(value) is answer_type:
        return CheckResult(True, "variable")
    return CheckResult(
        False,
        "type_error:simple",
        f"incorrect type for {param!r}: expected {type_name}, "
        f"got {type(value).__name__} ({value!r})",
    )


def standardize(text: str) -> str:
    """BFCL's string normalisation: drop spaces and ``,./-_*^``, lowercase, ``'`` -> ``"``."""
    return _STANDARDISE.sub("", text).lower().replace("'", '"')


def _string_check(param: str, value: str, options: Sequence[Any]) -> CheckResult:
    allowed = [standardize(o) for o in options if type(o) is str]
    if standardize(value) not in allowed:
        return CheckResult(
            False,
            "value_error:string",
            f"invalid value for {param!r}: {value!r}; expected one of {options}",
        )
    return OK


def _list_check(param: str, value: list[Any], options: Sequence[Any]) -> CheckResult:
    mine = [standardize(v) if type(v) is str else v for v in value]
    # BFCL iterates every option, so the "" option stands for the empty list.
    allowed = [
        [standardize(v) if type(v) is str else v for v in option]
        for option in options
        if isinstance(option, list | str)
    ]
    if mine not in allowed:
        return CheckResult(
            False,
            "value_error:list/tuple",
            f"invalid value for {param!r}: {value!r}; expected one of {options}",
        )
    return OK


def _dict_check(param: str, value: dict[str, Any], options: Sequence[Any]) -> CheckResult:
    result = CheckResult(False, "dict_checker:unclear", f"no allowed dict matches {param!r}")
    for option in options:
        if option == "" or not isinstance(option, dict):
            continue
        ok = True
        for key, item in value.items():
            if key not in option:
                result = CheckResult(False, "value_error:dict_key", f"unexpected dict key {key!r}")
                ok = False
                break
            mine = standardize(item) if type(item) is str else item
            allowed = [standardize(o) if type(o) is str else o for o in option[key]]
            if mine not in allowed:
                result = CheckResult(
                    False, "value_error:dict_value", f"invalid value for {key!r}: {item!r}"
                )
                ok = False
                break
        if ok:
            for key, allowed_values in option.items():
                if key not in value and "" not in allowed_values:
                    result = CheckResult(False, "value_error:dict_key", f"missing dict key {key!r}")
                    ok = False
                    break
        if ok:
            return OK
    return result


def _list_dict_check(param: str, value: list[Any], options: Sequence[Any]) -> CheckResult:
    result = CheckResult(False, "list_dict_checker:unclear", f"no allowed list matches {param!r}")
    for option in options:
        if isinstance(option, str):  # BFCL: the "" option has length 0
            option = list(option)
        if not isinstance(option, list) or len(value) != len(option):
            result = CheckResult(
                False, "value_error:list_dict_count", "wrong number of dictionaries in the list"
            )
            continue
        ok = True
        for item, allowed in zip(value, option):
            result = _dict_check(param, item, [allowed])
            if not result.valid:
                ok = False
                break
        if ok:
            return OK
    return result
