"""The command line against absurd flags and hostile or broken record files: one line, exit 2.

Each case names the limit it checks: a flag's range (its ``type=``, multiturn_envs.cli.common
and multiturn_envs.cli.serve), or the record reader's bounds (``MAX_LINE_BYTES``,
``MAX_RECORD_DEPTH``, the field types it checks). Flags are checked in-process (argparse stops
before anything runs); record files through the real console script in a subprocess, as a
user meets them. No case may print a traceback, a MemoryError or a RecursionError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiturn_envs.cli import main
from multiturn_envs.errors import RecordFileError
from multiturn_envs.harness.records import MAX_LINE_BYTES, MAX_RECORD_DEPTH, read_run

FROZEN = "MT/FrozenLake-v0"
BAD_OUTPUT = ("Traceback", "MemoryError", "RecursionError")


def one_line_exit_2(code: int, err: str) -> str:
    """The CLI's promise for a user mistake; the line."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert not any(word in err for word in BAD_OUTPUT), err
    return lines[0]


# ------------------------------------------------------------------------------ flag ranges
FLAGS: list[tuple[str, list[str], str]] = [
    ("IN_FLIGHT 1e9", ["eval", FROZEN, "--in-flight", "1e9"], "--in-flight"),
    ("IN_FLIGHT 10**9", ["eval", FROZEN, "--in-flight", "1000000000"], "--in-flight"),
    ("IN_FLIGHT 0", ["eval", FROZEN, "--in-flight", "0"], "--in-flight"),
    ("WORKERS 1e8", ["eval", FROZEN, "--workers", "100000000"], "--workers"),
    ("ERROR_AFTER 1e12", ["eval", FROZEN, "--error-after", "1000000000000"], "--error-after"),
    ("ERROR_AFTER -1", ["eval", FROZEN, "--error-after", "-1"], "--error-after"),
    ("SAMPLES 1e9", ["eval", FROZEN, "--samples", "1000000000"], "--samples"),
    ("MAX_TURNS 1e12", ["eval", FROZEN, "--max-turns", "1000000000000"], "--max-turns"),
    ("SEED 2**80", ["eval", FROZEN, "--seed", str(2**80)], "--seed"),
    ("SEED 5000 digits", ["eval", FROZEN, "--seed", "9" * 5000], "--seed"),
    ("RAY_WORKERS 0", ["eval", FROZEN, "--ray-workers", "0"], "--ray-workers"),
    ("BOOTSTRAP 6.6e7", ["report", "x.jsonl", "--bootstrap", "66000000"], "--bootstrap"),
    ("BOOTSTRAP -1", ["dynamics", "x.jsonl", "--bootstrap", "-1"], "--bootstrap"),
    ("ALPHA 5", ["report", "x.jsonl", "--alpha", "5"], "--alpha"),
    ("ALPHA nan", ["report", "x.jsonl", "--alpha", "nan"], "--alpha"),
    ("ALPHA 1", ["nll", "x.jsonl", "--scoring-model", "m", "--alpha", "1"], "--alpha"),
    (
        "ACTIONS 1e9",
        ["compare", FROZEN, "--policy-a", "a", "--policy-b", "b", "--actions", "1000000000"],
        "--actions",
    ),
    ("TRAIN_STEPS 0", ["train", "--steps", "0"], "--steps"),
    ("STEP_WEIGHT inf", ["train", "--step-weight", "inf"], "--step-weight"),
    ("serve --max-sessions 0", ["serve", FROZEN, "--max-sessions", "0"], "--max-sessions"),
    (
        "serve --request-timeout inf",
        ["serve", FROZEN, "--request-timeout", "inf"],
        "--request-timeout",
    ),
    ("serve --port 70000", ["serve", FROZEN, "--port", "70000"], "--port"),
    (
        "serve --max-request-bytes 1e12",
        ["serve", FROZEN, "--max-request-bytes", str(10**12)],
        "--max-request-bytes",
    ),
    (
        "serve --worker-memory-mb -1",
        ["serve", FROZEN, "--worker-memory-mb", "-1"],
        "--worker-memory-mb",
    ),
]


@pytest.mark.parametrize(("name", "args", "flag"), FLAGS, ids=[f[0] for f in FLAGS])
def test_flag_ranges_refuse_absurd_values_while_parsing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, args: list[str], flag: str
) -> None:
    out = tmp_path / "never.jsonl"
    extra = ["--out", str(out)] if args[0] == "eval" else []
    line = one_line_exit_2(main([*args, *extra]), capsys.readouterr().err)
    assert flag in line and ("an integer in" in line or "a number in" in line), line
    assert not out.exists()


# ------------------------------------------------------------------------------ record files
def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "multiturn_envs.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real record file's header and first trajectory, to break one field at a time."""
    path = tmp_path_factory.mktemp("records") / "good.jsonl"
    assert main(["eval", FROZEN, "--tasks", "2", "--samples", "1", "--out", str(path), "-q"]) == 0
    header, first = path.read_text().splitlines()[:2]
    return json.loads(header), json.loads(first)


def with_field(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    changed = json.loads(json.dumps(obj))
    target = changed["config"] if key.startswith("config.") else changed
    target[key.removeprefix("config.")] = value
    return changed


def record_file(
    path: Path, good_run: tuple[dict[str, Any], dict[str, Any]], case: str
) -> tuple[bytes, str]:
    """The bytes of a broken record file, and what the error line must say."""
    header, record = good_run
    h, r = json.dumps(header), json.dumps(record)
    lines: dict[str, tuple[str | bytes, str]] = {
        "MAX_RECORD_DEPTH: 100,000 [ as line 1": ("[" * 100_000 + "\n", "line 1"),
        "MAX_RECORD_DEPTH: a trajectory 3,000 deep": (
            f'{h}\n{{"kind": "trajectory", "x": {"[" * 3000}{"]" * 3000}}}\n',
            f"line 2 is refused: nested 3001 deep, over the limit of {MAX_RECORD_DEPTH}",
        ),
        "MAX_LINE_BYTES: one line over the bound": (
            b'{"a": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n',
            f"line 1 is over {MAX_LINE_BYTES:,} bytes",
        ),
        "garbage bytes": (b"\x00\xff\xfe garbage\n", "line 1 is not valid JSON"),
        "a truncated header": (h[:40], "no header line"),
        "an empty file": ("", "no header line"),
        "not an object": ("[1, 2, 3]\n", "line 1 is not a JSON object"),
        "schema 99": (json.dumps({**header, "schema": 99}) + "\n", "record schema 99"),
        "a torn line in the middle": (f"{h}\n{r[:50]}\n{r}\n", "line 2 is not valid JSON"),
        "sample a string": (
            f"{h}\n{json.dumps(with_field(record, 'sample', 'zero'))}\n",
            "line 2: 'sample' is str",
        ),
        "first_success_turn a string": (
            f"{h}\n{json.dumps(with_field(record, 'first_success_turn', 'soon'))}\n",
            "'first_success_turn' is str",
        ),
        "rewards a string": (
            f"{h}\n{json.dumps(with_field(record, 'rewards', 'lots'))}\n",
            "'rewards' is str",
        ),
        "success a string": (
            f"{h}\n{json.dumps(with_field(record, 'success', 'yes'))}\n",
            "'success' is str",
        ),
        "config.tasks a string": (
            f"{json.dumps(with_field(header, 'config.tasks', 'abc'))}\n{r}\n",
            "'tasks' is str",
        ),
        "config.env_kwargs a list": (
            f"{json.dumps(with_field(header, 'config.env_kwargs', ['x']))}\n{r}\n",
            "'env_kwargs' is list",
        ),
        "config.max_turns a float": (
            f"{json.dumps(with_field(header, 'config.max_turns', 4.5))}\n{r}\n",
            "'max_turns' is float",
        ),
    }
    content, expected = lines[case]
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(data)
    return data, expected


RECORD_CASES = [
    "MAX_RECORD_DEPTH: 100,000 [ as line 1",
    "MAX_RECORD_DEPTH: a trajectory 3,000 deep",
    "MAX_LINE_BYTES: one line over the bound",
    "garbage bytes",
    "a truncated header",
    "an empty file",
    "not an object",
    "schema 99",
    "a torn line in the middle",
    "sample a string",
    "first_success_turn a string",
    "rewards a string",
    "success a string",
    "config.tasks a string",
    "config.env_kwargs a list",
    "config.max_turns a float",
]


@pytest.mark.parametrize("case", RECORD_CASES)
def test_report_names_the_file_and_line_of_a_broken_record_file(
    tmp_path: Path, good_run: tuple[dict[str, Any], dict[str, Any]], case: str
) -> None:
    path = tmp_path / "broken.jsonl"
    _, expected = record_file(path, good_run, case)
    proc = run_cli("report", str(path), "--no-plots", "--bootstrap", "10")
    line = one_line_exit_2(proc.returncode, proc.stderr)
    assert str(path) in line and expected in line, line


@pytest.mark.parametrize(
    "command",
    [
        ["dynamics", "{file}", "{file}", "--bootstrap", "10"],
        [
            "compare",
            FROZEN,
            "--policy-a",
            "expert",
            "--policy-b",
            "random",
            "--states-from",
            "{file}",
            "--actions",
            "2",
        ],
        ["eval", FROZEN, "--tasks", "2", "--samples", "1", "--out", "{file}", "-q"],  # resume
    ],
    ids=["dynamics", "compare --states-from", "eval resuming the file"],
)
def test_every_reader_of_record_files_keeps_the_bounds(
    tmp_path: Path, good_run: tuple[dict[str, Any], dict[str, Any]], command: list[str]
) -> None:
    """MAX_RECORD_DEPTH for every command that reads records (a resume reads the file too)."""
    path = tmp_path / "deep.jsonl"
    record_file(path, good_run, "MAX_RECORD_DEPTH: a trajectory 3,000 deep")
    proc = run_cli(*(part.format(file=path) for part in command))
    assert "nested 3001 deep" in one_line_exit_2(proc.returncode, proc.stderr)


def test_a_closed_stdout_pipe_ends_the_command_quietly() -> None:
    """``multiturn-envs list | head -1``: the reader goes away; no BrokenPipeError traceback,
    exit status 141 (128 + SIGPIPE) as coreutils give."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "multiturn_envs.cli", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the first line is written: every write meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(60) == 141
    assert err == "", err


# ------------------------------------------------------------------------------ generated
LINES = st.one_of(
    st.binary(max_size=300),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "kind",
                        "task_id",
                        "sample",
                        "max_turns",
                        "first_success_turn",
                        "schema",
                        "config",
                        "actions",
                        "rewards",
                        "success",
                    ]
                ),
                children,
                max_size=6,
            )
        ),
        max_leaves=20,
    ).map(lambda value: json.dumps(value).encode()),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
)


@given(st.lists(LINES, max_size=5), st.booleans())
def test_generated_record_files_are_read_or_refused_with_a_record_file_error(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], newline_at_end: bool
) -> None:
    """Whatever a record file holds, reading it gives records or a RecordFileError naming
    the file: never another exception."""
    path = tmp_path_factory.mktemp("gen") / "gen.jsonl"
    header = {"schema": 1, "kind": "header", "run_id": "x", "config": {"tasks": ["a"]}}
    body = b"\n".join([json.dumps(header).encode(), *lines]) + (b"\n" if newline_at_end else b"")
    path.write_bytes(body)
    try:
        read_run(path)
    except RecordFileError as exc:
        assert str(path) in str(exc)


@given(depth=st.integers(1, 5000), in_header=st.booleans(), opener=st.sampled_from(["[", '{"a":']))
def test_generated_nesting_is_read_up_to_max_record_depth_and_refused_beyond(
    tmp_path_factory: pytest.TempPathFactory, depth: int, in_header: bool, opener: str
) -> None:
    """MAX_RECORD_DEPTH: a value nested ``depth`` deep in the header or a trajectory is read
    when the line stays within the bound and refused (RecordFileError) when it does not."""
    closer = "]" if opener == "[" else "}"
    text = opener * depth + "1" + closer * depth
    header: dict[str, Any] = {"schema": 1, "kind": "header", "run_id": "x", "config": {}}
    record: dict[str, Any] = {"kind": "trajectory", "task_id": "a", "sample": 0, "max_turns": 1}
    if in_header:
        header["config"]["x"] = "@"  # the line's object and the config hold the value
    else:
        record["x"] = "@"
    line_depth = depth + (2 if in_header else 1)
    head = json.dumps(header).replace('"@"', text)
    body = json.dumps(record).replace('"@"', text)
    path = tmp_path_factory.mktemp("deep") / "deep.jsonl"
    path.write_text(f"{head}\n{body}\n")
    if line_depth <= MAX_RECORD_DEPTH:
        assert len(read_run(path).records) == 1
    else:
        with pytest.raises(RecordFileError, match=f"line {1 if in_header else 2}.*nested"):
            read_run(path)


def test_bound_a_deep_env_arg_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """``--env-arg`` values are JSON measured before parsing (``env_args.MAX_ARG_DEPTH``)."""
    deep = "x=" + "[" * 100_000 + "]" * 100_000
    line = one_line_exit_2(main(["eval", FROZEN, "--env-arg", deep]), capsys.readouterr().err)
    assert "the env argument x is refused: nested" in line
