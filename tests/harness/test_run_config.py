"""The run config has one definition, ``EvalConfig``; the header's form and checks follow it.

``RunConfig`` (the header's ``config`` as a TypedDict) must list exactly ``EvalConfig``'s fields
plus ``schema``, with the same types. The checks of a header read from disk are built from the
dataclass's field types; they must accept and refuse exactly what the hand-written table did
before it was derived (kept below, frozen, as the reference), with the same messages. The
header line of a run is pinned byte for byte, so that resuming and reading old files holds.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.errors import RecordFileError
from multiturn_envs.harness import SCHEMA_VERSION, EvalConfig, RunConfig, read_header
from multiturn_envs.harness.records import dumps_line, make_header


def test_run_config_is_the_dataclass_fields_plus_schema_with_the_same_types() -> None:
    typed = typing.get_type_hints(RunConfig)
    fields = typing.get_type_hints(EvalConfig)
    names = [f.name for f in dataclasses.fields(EvalConfig)]
    assert list(typed) == ["schema", *names]
    assert typed == {"schema": int, **{n: fields[n] for n in names}}


def test_to_dict_has_run_configs_keys() -> None:
    config = EvalConfig("MT/FrozenLake-v0", "random", ["a"], 2, 3)
    assert set(config.to_dict()) == set(RunConfig.__annotations__)
    assert config.to_dict()["schema"] == SCHEMA_VERSION


# The header line of two runs, as written before EvalConfig moved to harness/run_config.py
# (the run id hashes the config: a change here would make every old file "another run").
# Schema 2 (tokens per turn, token_limit) changed them once, on purpose: a schema-1 file still
# reads, and a resume of one is refused with a message (test_records.py).
PINNED = [
    (
        EvalConfig(
            "MT/FrozenLake-v0",
            "random",
            ["b", "a"],
            3,
            5,
            budget_mode="announced",
            turn_grid=[5, 2],
            error_after=1,
            seed=7,
            env_kwargs={"size": 4, "é": [1, None]},
        ),
        '{"schema":2,"kind":"header","run_id":"15515105960fa22e","config":{"budget_mode":'
        '"announced","env_id":"MT/FrozenLake-v0","env_kwargs":{"size":4,"é":[1,null]},'
        '"error_after":1,"max_turns":5,"policy":"random","samples":3,"schema":2,"seed":7,'
        '"tasks":["b","a"],"token_limit":null,"turn_grid":[2,5]},"created":'
        '"2026-01-01T00:00:00+00:00","package_version":"0.0"}\n',
    ),
    (
        EvalConfig("x", "p", ["t"], 1, 1),
        '{"schema":2,"kind":"header","run_id":"6556783db3fcdc42","config":{"budget_mode":'
        '"hidden","env_id":"x","env_kwargs":{},"error_after":null,"max_turns":1,"policy":"p",'
        '"samples":1,"schema":2,"seed":0,"tasks":["t"],"token_limit":null,"turn_grid":null},'
        '"created":"2026-01-01T00:00:00+00:00","package_version":"0.0"}\n',
    ),
]


@pytest.mark.parametrize(("config", "line"), PINNED)
def test_the_header_line_is_byte_identical_to_before(config: EvalConfig, line: str) -> None:
    header = make_header(
        config.to_dict(), created="2026-01-01T00:00:00+00:00", package_version="0.0"
    )
    assert dumps_line(header) == line.encode("utf-8")


# ------------------------------------------------ the header checks, derived vs the old table
# Today's checks before they were derived from EvalConfig (records.py at the merge of issue 23
# part 3), kept verbatim as the reference the derived ones must equal.
_OLD_CONFIG: dict[str, tuple[tuple[type, ...], str]] = {
    "env_id": ((str,), "a string"),
    "policy": ((str,), "a string"),
    "tasks": ((list,), "a list of task ids"),
    "samples": ((int,), "an int"),
    "max_turns": ((int,), "an int"),
    "budget_mode": ((str,), "a string"),
    "turn_grid": ((list, type(None)), "a list or null"),
    "error_after": ((int, type(None)), "an int or null"),
    "seed": ((int,), "an int"),
    "env_kwargs": ((dict,), "an object"),
    "token_limit": ((int, type(None)), "an int or null"),  # schema 2
}
_ABSENT = object()


def _old_check(obj: Mapping[str, Any], path: str) -> str | None:
    """The old ``read_header`` after its line was parsed: ``None`` (accepted) or the message."""
    if obj.get("kind") != "header":
        return f"{path}: not a multiturn-envs record file (no header line)"
    if obj.get("schema") not in (1, SCHEMA_VERSION):  # schema 2 reads schema 1 too
        return f"{path}: record schema {obj.get('schema')!r}, this version reads 1, 2"
    if not isinstance(obj.get("config"), dict):
        return f"{path}: the header line has no 'config' object"
    where = f"{path}: the header's config"
    for name, (kinds, wanted) in _OLD_CONFIG.items():
        value = obj["config"].get(name, _ABSENT)
        if value is not _ABSENT and type(value) not in kinds:
            return f"{where}: {name!r} is {type(value).__name__}, expected {wanted}"
    tasks = obj["config"].get("tasks", [])
    if not all(isinstance(t, str) for t in tasks):
        return f"{path}: the header's config lists a task id that is no string"
    return None


_json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
)
_json = st.recursive(
    _json_scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
# A value of each JSON type, and the ones a type check confuses (a bool for an int, a float
# that is whole, a list of non-strings for task ids), then anything.
_odd = st.sampled_from(
    [None, True, False, 0, 1, -1, 1.0, 1.5, "", "x", [], [1], ["a", 2], {}, {"a": 1}]
)
_wrong = _odd | _json
_VALID: dict[str, st.SearchStrategy[Any]] = {
    "schema": st.just(SCHEMA_VERSION),
    "env_id": st.text(max_size=5),
    "policy": st.text(max_size=5),
    "tasks": st.lists(st.text(max_size=3), max_size=3),
    "samples": st.integers(0, 9),
    "max_turns": st.integers(0, 9),
    "budget_mode": st.sampled_from(["hidden", "announced"]),
    "turn_grid": st.none() | st.lists(st.integers(0, 9), max_size=3),
    "error_after": st.none() | st.integers(0, 9),
    "seed": st.integers(0, 2**64),
    "env_kwargs": st.dictionaries(st.text(max_size=3), _json, max_size=2),
}


@st.composite
def _headers(draw: st.DrawFn) -> dict[str, Any]:
    """A header: well-formed but for one or two config fields (absent, valid, or any JSON
    value), maybe extra keys; now and then a wrong kind, schema or a config that is no object."""
    odd = draw(st.sets(st.sampled_from(sorted(_VALID)), min_size=1, max_size=2))
    config: dict[str, Any] = {}
    for name, valid in _VALID.items():
        choice = draw(st.sampled_from(["wrong", "wrong", "absent", "valid"]))
        if name not in odd or choice == "valid":
            config[name] = draw(valid)
        elif choice == "wrong":
            config[name] = draw(_wrong)
    config.update(draw(st.dictionaries(st.text(max_size=3), _json, max_size=2)))
    header: dict[str, Any] = {"schema": SCHEMA_VERSION, "kind": "header", "config": config}
    broken = draw(st.sampled_from([None] * 7 + ["schema", "kind", "config"]))
    if broken is not None:
        header[broken] = draw(_wrong)
    return header


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / "header.jsonl"


@given(header=_headers())
def test_derived_header_checks_accept_and_refuse_as_the_old_table_did(
    scratch: Path, header: dict[str, Any]
) -> None:
    scratch.write_text(json.dumps(header) + "\n", encoding="utf-8")
    expected = _old_check(json.loads(scratch.read_text("utf-8")), str(scratch))
    try:
        got = read_header(scratch)
    except RecordFileError as exc:
        assert str(exc) == expected
    else:
        assert expected is None
        assert got == json.loads(scratch.read_text("utf-8"))


def test_each_config_field_refuses_a_wrong_type_with_the_old_message(scratch: Path) -> None:
    """Not left to chance: every field of EvalConfig, given a value of every wrong JSON type."""
    samples = {"a string": "x", "an int": 1, "a bool": True, "a list": [], "an object": {}}
    samples |= {"null": None, "a number": 1.5}
    good = EvalConfig("e", "p", ["t"], 1, 1).to_dict()
    for name in _OLD_CONFIG:
        for value in samples.values():
            header = {"schema": 1, "kind": "header", "config": {**good, name: value}}
            scratch.write_text(json.dumps(header) + "\n", encoding="utf-8")
            expected = _old_check(header, str(scratch))
            try:
                read_header(scratch)
            except RecordFileError as exc:
                assert str(exc) == expected
            else:
                assert expected is None
