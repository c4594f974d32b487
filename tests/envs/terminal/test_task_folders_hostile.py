"""Terminal-Bench 1 and Harbor task folders as a hostile dataset would make them (issue 29).

Each case names the bound it checks (``multiturn_envs/envs/terminal/loading.py``'s task-folder
bounds, read through ``multiturn_envs.untrusted``): a refused task is a row with its reason,
its neighbours still load, no host file is ever read into a task, and no parser runs without
a bound. Loading needs no Docker here (``image=`` given, or a light build plan), so these run
everywhere.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.terminal.harbor import load_harbor, load_harbor_task
from multiturn_envs.envs.terminal.loading import (
    MAX_INSTRUCTION_BYTES,
    MAX_TIMEOUT_S,
    NoTasksLoaded,
)
from multiturn_envs.envs.terminal.terminal_bench import (
    load_terminal_bench,
    load_terminal_bench_task,
)
from multiturn_envs.errors import UntrustedInputError

SECRET = "host-secret-8c1f0e\n"
TB_YAML = "instruction: Write hello.\ndifficulty: easy\nmax_test_timeout_sec: 30\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file no task may ever carry (stands in for /etc/passwd, ~/.ssh/id_rsa)."""
    path = tmp_path / "id_rsa"
    path.write_text(SECRET)
    return path


def harbor(root: Path, name: str = "good", toml: str = "", **files: str) -> Path:
    """A minimal Harbor task folder (a light build on the terminal image: no engine needed)."""
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "environment").mkdir()
    (folder / "solution").mkdir()
    (folder / "task.toml").write_text(toml or 'version = "1.0"\n[verifier]\ntimeout_sec = 60\n')
    (folder / "instruction.md").write_text("Write hello to /app/out.\n")
    (folder / "tests" / "test.sh").write_text("test -f /app/out\n")
    (folder / "solution" / "solve.sh").write_text("echo hello > /app/out\n")
    (folder / "environment" / "Dockerfile").write_text("ARG BASE\nFROM $BASE\nWORKDIR /app\n")
    for rel, text in files.items():
        (folder / rel).write_text(text)
    return folder


def terminal_bench(root: Path, name: str = "good", yaml: str = TB_YAML) -> Path:
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "task.yaml").write_text(yaml)
    (folder / "run-tests.sh").write_text("pytest $TEST_DIR/test_outputs.py -rA\n")
    (folder / "tests" / "test_outputs.py").write_text("def test_x():\n    assert True\n")
    (folder / "solution.sh").write_text("echo hello > out\n")
    (folder / "Dockerfile").write_text("FROM python:3.13-slim\nWORKDIR /app\n")
    return folder


def relink(path: Path, target: Path | str) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(target)


def assert_no_secret(task: object) -> None:
    assert SECRET.strip() not in repr(task)


# ------------------------------------------------------------------ host files through a task
@pytest.mark.parametrize(
    "rel", ["tests/test.sh", "tests/extra.txt", "instruction.md", "solution/solve.sh", "task.toml"]
)
def test_bound_no_link_out_of_a_harbor_task(tmp_path: Path, secret: Path, rel: str) -> None:
    folder = harbor(tmp_path)
    relink(folder / rel, secret)
    with pytest.raises(UntrustedInputError, match="outside the folder") as info:
        load_harbor_task(folder, image="x")
    assert rel in str(info.value) and SECRET.strip() not in str(info.value)


@pytest.mark.parametrize(
    "rel", ["tests/test_outputs.py", "solution.sh", "run-tests.sh", "task.yaml"]
)
def test_bound_no_link_out_of_a_terminal_bench_task(tmp_path: Path, secret: Path, rel: str) -> None:
    folder = terminal_bench(tmp_path)
    relink(folder / rel, secret)
    with pytest.raises(UntrustedInputError, match="outside the folder"):
        load_terminal_bench_task(folder, image="x")


def test_bound_a_tests_folder_that_is_a_link_out_is_refused(tmp_path: Path, secret: Path) -> None:
    folder = harbor(tmp_path)
    (folder / "tests" / "test.sh").unlink()
    (folder / "tests").rmdir()
    relink(folder / "tests", secret.parent)
    with pytest.raises(UntrustedInputError, match="outside the folder"):
        load_harbor_task(folder, image="x")


def test_bound_links_inside_the_task_folder_still_work(tmp_path: Path) -> None:
    folder = harbor(tmp_path)
    (folder / "tests" / "copy.sh").symlink_to("test.sh")
    task = load_harbor_task(folder, image="x")
    assert task.tests["copy.sh"] == task.tests["test.sh"] == b"test -f /app/out\n"


def test_bound_a_build_context_with_a_link_out_is_refused(tmp_path: Path, secret: Path) -> None:
    """The light build copies environment/ into the task's image: a link leaving the task
    would carry a host file into the container the agent works in."""
    folder = harbor(tmp_path)
    (folder / "environment" / "key").symlink_to(secret)
    (folder / "environment" / "Dockerfile").write_text(
        "ARG BASE\nFROM $BASE\nWORKDIR /app\nCOPY key /app/key\n"
    )
    with pytest.raises(UntrustedInputError, match="outside the folder"):
        load_harbor_task(folder)
    (folder / "environment" / "key").unlink()
    (folder / "environment" / "dir").symlink_to(secret.parent)
    with pytest.raises(UntrustedInputError, match="outside the folder"):
        load_harbor_task(folder)
    (folder / "environment" / "dir").unlink()
    environment = folder / "environment"
    for child in environment.iterdir():
        child.unlink()
    environment.rmdir()
    environment.symlink_to(secret.parent)
    with pytest.raises(UntrustedInputError, match="outside the folder"):
        load_harbor_task(folder)


@pytest.mark.parametrize(
    ("build", "why"),
    [
        ("dockerfile: ../../../../../../etc/passwd", "leaves the folder"),
        ("dockerfile: /etc/passwd", "absolute path"),
        ("context: ../..", "leaves the folder"),
        ("context: /etc", "absolute path"),
    ],
)
def test_bound_compose_paths_stay_in_the_task_folder(tmp_path: Path, build: str, why: str) -> None:
    """The issue's compose ``dockerfile: ../../..`` path: refused before anything is read."""
    folder = terminal_bench(tmp_path)
    (folder / "docker-compose.yaml").write_text(
        f"services:\n  client:\n    build:\n      {build}\n"
    )
    with pytest.raises(UntrustedInputError, match=why):
        load_terminal_bench_task(folder, build=False)


# ------------------------------------------------------------------ parsing without bounds
def test_bound_a_yaml_alias_bomb_task_is_refused_fast(tmp_path: Path) -> None:
    """The issue's 335-byte task.yaml with 8 levels of aliases (+354 MB as a field before)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(8):
        name, prev = chr(98 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    lines.append("instruction: *i")
    folder = terminal_bench(tmp_path, yaml="\n".join(lines) + "\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    with pytest.raises(UntrustedInputError, match="expand to over"):
        load_terminal_bench_task(folder, image="x")
    assert time.monotonic() - start < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB


@settings(max_examples=10, deadline=None)
@given(depth=st.integers(65, 6000))
def test_bound_deep_task_files_are_refused_not_recursion_error(
    tmp_path_factory: pytest.TempPathFactory, depth: int
) -> None:
    root = tmp_path_factory.mktemp("deep")
    tb = terminal_bench(root, "tb", yaml=f"instruction: x\nx: {'[' * depth}{']' * depth}\n")
    with pytest.raises(UntrustedInputError, match="nested"):
        load_terminal_bench_task(tb, image="x")
    toml = f'version = "1.0"\nx = {"[" * depth}{"]" * depth}\n'
    with pytest.raises(UntrustedInputError, match="nested"):
        load_harbor_task(harbor(root, "harbor", toml=toml), image="x")


def test_bound_a_sparse_2_gib_test_file_is_not_read(tmp_path: Path) -> None:
    folder = harbor(tmp_path)
    with open(folder / "tests" / "data.bin", "wb") as handle:
        handle.truncate(2 << 30)
    start = time.monotonic()
    with pytest.raises(UntrustedInputError, match="over the limit"):
        load_harbor_task(folder, image="x")
    assert time.monotonic() - start < 2


def test_bound_a_sparse_file_in_the_build_context_is_not_hashed(tmp_path: Path) -> None:
    folder = harbor(tmp_path)
    with open(folder / "environment" / "data.bin", "wb") as handle:
        handle.truncate(2 << 30)
    start = time.monotonic()
    with pytest.raises(UntrustedInputError, match="together are over the limit of 1,073,741,824"):
        load_harbor_task(folder)
    assert time.monotonic() - start < 2


def test_bound_a_50_mb_instruction_is_refused(tmp_path: Path) -> None:
    folder = harbor(tmp_path)
    with open(folder / "instruction.md", "w") as handle:
        handle.write("do it " * (50_000_000 // 6))
    with pytest.raises(UntrustedInputError, match=f"over the limit of {MAX_INSTRUCTION_BYTES:,}"):
        load_harbor_task(folder, image="x")
    tb = terminal_bench(tmp_path, "tb", yaml="instruction: " + "x" * (MAX_INSTRUCTION_BYTES + 1))
    with pytest.raises(UntrustedInputError, match="over the limit"):
        load_terminal_bench_task(tb, image="x")


def test_bound_a_fifo_in_a_task_never_hangs(tmp_path: Path) -> None:
    folder = harbor(tmp_path)
    os.mkfifo(folder / "tests" / "pipe")
    (folder / "instruction.md").unlink()
    os.mkfifo(folder / "instruction.md")
    start = time.monotonic()
    with pytest.raises(ValueError):
        load_harbor_task(folder, image="x")
    (folder / "instruction.md").unlink()
    (folder / "instruction.md").write_text("x\n")
    with pytest.raises(UntrustedInputError, match="FIFO"):
        load_harbor_task(folder, image="x")
    assert time.monotonic() - start < 5


def test_bound_text_is_utf8(tmp_path: Path) -> None:
    folder = harbor(tmp_path)
    (folder / "instruction.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(UntrustedInputError, match="not utf-8 text"):
        load_harbor_task(folder, image="x")


# ------------------------------------------------------------------ fields taken on trust
BAD_TIMEOUTS = ["-5", "nan", "inf", "1e29", "0", '"60"', "true", "[60]"]


@pytest.mark.parametrize("value", BAD_TIMEOUTS)
def test_bound_harbor_timeout_sec_is_a_positive_finite_number(tmp_path: Path, value: str) -> None:
    folder = harbor(tmp_path, toml=f'version = "1.0"\n[verifier]\ntimeout_sec = {value}\n')
    with pytest.raises(UntrustedInputError, match=r"verifier\.timeout_sec must be a number"):
        load_harbor_task(folder, image="x")


@pytest.mark.parametrize("value", [*BAD_TIMEOUTS[:4], ".nan", ".inf", "-.inf"])
def test_bound_tb_max_test_timeout_sec_is_positive_finite(tmp_path: Path, value: str) -> None:
    folder = terminal_bench(tmp_path, yaml=f"instruction: x\nmax_test_timeout_sec: {value}\n")
    with pytest.raises(UntrustedInputError, match="max_test_timeout_sec must be a number"):
        load_terminal_bench_task(folder, image="x")


@pytest.mark.parametrize("value", ["inf", "-1", "[1024]", '"lots"', "2.5", "1e30"])
def test_bound_memory_mb_is_a_whole_number_in_range(tmp_path: Path, value: str) -> None:
    """``memory_mb = inf`` raised OverflowError, a list TypeError (and dropped the folder)."""
    folder = harbor(tmp_path, toml=f'version = "1.0"\n[environment]\nmemory_mb = {value}\n')
    with pytest.raises(UntrustedInputError, match=r"environment\.memory_mb must be a whole"):
        load_harbor_task(folder, image="x")


@pytest.mark.parametrize(
    ("toml", "match"),
    [
        ("[environment]\ncpus = inf\n", r"environment\.cpus"),
        ("[environment]\ngpus = [1]\n", r"environment\.gpus"),
        ("[environment]\nallow_internet = 'no'\n", r"environment\.allow_internet"),
        ("[environment]\ndocker_image = '--privileged'\n", "not an image name"),
        ("[verifier]\nenv = {A = [1]}\n", r"verifier\.env\.A"),
        ("[verifier]\nuser = [0]\n", r"verifier\.user"),
        ("verifier = 5\n", "verifier must be a table"),
        ("[metadata]\ncategory = 5\n", r"metadata\.category"),
    ],
)
def test_bound_harbor_fields_are_typed(tmp_path: Path, toml: str, match: str) -> None:
    folder = harbor(tmp_path, toml=f'version = "1.0"\n{toml}')
    with pytest.raises(UntrustedInputError, match=match) as info:
        load_harbor_task(folder, image="x")
    assert "task.toml" in str(info.value)


def test_fields_in_range_still_load(tmp_path: Path) -> None:
    toml = (
        'version = "1.0"\n[verifier]\ntimeout_sec = 900.0\nenv = {A = "1", B = 2}\n'
        '[environment]\nmemory = "2G"\ncpus = 1\ngpus = 0\ndocker_image = "alexgshaw/x:2025"\n'
    )
    task = load_harbor_task(harbor(tmp_path, toml=toml), image="x")
    assert task.check_timeout_s == 900.0 and task.image == "x" and task.memory_mb == 2048
    assert dict(task.verifier_environment) == {"A": "1", "B": "2"}
    assert any("2048 MB" in n for n in task.notes)
    longest = harbor(tmp_path, "slow", toml=f"[verifier]\ntimeout_sec = {MAX_TIMEOUT_S}\n")
    assert load_harbor_task(longest, image="x").check_timeout_s == MAX_TIMEOUT_S


# ------------------------------------------------------------------ one bad task hides none
def test_bound_one_bad_task_hides_no_good_one(tmp_path: Path, secret: Path) -> None:
    harbor(tmp_path, "a-good")
    harbor(tmp_path, "b-inf-memory", toml='version = "1.0"\n[environment]\nmemory_mb = inf\n')
    harbor(tmp_path, "c-list-memory", toml='version = "1.0"\n[environment]\nmemory_mb = [1]\n')
    harbor(tmp_path, "d-nan", toml='version = "1.0"\n[verifier]\ntimeout_sec = nan\n')
    relink(harbor(tmp_path, "e-link") / "instruction.md", secret)
    harbor(tmp_path, "f-deep", toml="x = " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "g-escape").symlink_to(secret.parent)  # a task folder that is a link out
    harbor(tmp_path, "h-good")
    with pytest.warns(UserWarning):
        loaded = load_harbor(tmp_path, image="x")
    assert [t.task_id for t in loaded] == ["harbor/a-good", "harbor/h-good"]
    assert set(loaded.problems) == {
        "b-inf-memory",
        "c-list-memory",
        "d-nan",
        "e-link",
        "f-deep",
        "g-escape",
    }
    assert set(loaded.causes.values()) == {"refused"}
    assert_no_secret(loaded)


def test_bound_no_good_task_at_all_lists_every_reason(tmp_path: Path) -> None:
    harbor(tmp_path, "a", toml="[verifier]\ntimeout_sec = -5\n")
    harbor(tmp_path, "b", toml="[verifier]\ntimeout_sec = inf\n")
    with pytest.raises(NoTasksLoaded) as info, pytest.warns(UserWarning):
        load_harbor(tmp_path, image="x")
    assert set(info.value.problems) == {"a", "b"}


# ------------------------------------------------------------------ the command line
def test_verify_prints_one_line_per_bad_task_and_exits_2(tmp_path: Path, secret: Path) -> None:
    """``sandbox terminal verify``: 30 to 3,000-line tracebacks and exit 1 before."""
    harbor(tmp_path, "a-nan", toml='version = "1.0"\n[verifier]\ntimeout_sec = nan\n')
    harbor(tmp_path, "b-inf", toml='version = "1.0"\n[environment]\nmemory_mb = inf\n')
    harbor(tmp_path, "c-deep", toml="x = " + "[" * 5000 + "]" * 5000 + "\n")
    relink(harbor(tmp_path, "d-link") / "tests" / "test.sh", "/etc/passwd")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "multiturn_envs.cli",
            "sandbox",
            "terminal",
            "verify",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4, done.stdout
    for line, name in zip(lines, ["a-nan", "b-inf", "c-deep", "d-link"]):
        assert line.startswith(f"harbor/{name}: REFUSED: "), line
    assert "root:" not in done.stdout


def test_verify_of_a_folder_without_tasks_is_one_line_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "multiturn_envs.cli",
            "sandbox",
            "terminal",
            "verify",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_bound_one_bad_terminal_bench_task_hides_no_good_one(tmp_path: Path) -> None:
    terminal_bench(tmp_path, "a-good")
    terminal_bench(tmp_path, "b-nan", yaml="instruction: x\nmax_test_timeout_sec: .nan\n")
    terminal_bench(tmp_path, "c-cycle", yaml="instruction: x\na: &a [*a]\n")
    terminal_bench(tmp_path, "d-list", yaml="instruction: [x]\n")
    terminal_bench(tmp_path, "e-deep", yaml="instruction: x\ny: " + "[" * 5000 + "]" * 5000)
    with pytest.warns(UserWarning):
        loaded = load_terminal_bench(tmp_path, image="x")
    assert [t.task_id for t in loaded] == ["tb/a-good"]
    assert set(loaded.problems) == {"b-nan", "c-cycle", "d-list", "e-deep"}
