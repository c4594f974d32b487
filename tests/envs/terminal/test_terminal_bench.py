"""The Terminal-Bench task loader: a task folder in TB's format runs in MT/Terminal-v0, and a
task whose image cannot be built offline says so."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.envs.terminal.image import TERMINAL_IMAGE
from multiturn_envs.envs.terminal.terminal_bench import (
    ImageUnavailable,
    load_terminal_bench,
    load_terminal_bench_task,
)

pytestmark = pytest.mark.docker

TEST_OUTPUTS = """\
from pathlib import Path


def test_greeting_exists():
    assert Path("/app/greeting.txt").exists()


def test_greeting_text():
    assert Path("/app/greeting.txt").read_text() == "hello, " + Path("/app/name.txt").read_text()
"""


def _task_folder(root: Path, name: str, base: str) -> Path:
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "task.yaml").write_text(
        "instruction: |\n  Write 'hello, ' followed by the content of /app/name.txt to "
        "/app/greeting.txt.\ndifficulty: easy\ncategory: file-operations\n"
        "max_agent_timeout_sec: 360\nmax_test_timeout_sec: 60\n"
    )
    (folder / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\nCOPY name.txt /app/\n")
    (folder / "name.txt").write_text("world\n")
    (folder / "solution.sh").write_text(
        "#!/bin/bash\nprintf 'hello, %s\\n' \"$(cat /app/name.txt)\" > /app/greeting.txt\n"
    )
    (folder / "run-tests.sh").write_text(
        "#!/bin/bash\ncd /app\npython3 -m pytest -p no:cacheprovider -rA "
        '"$TEST_DIR/tests/test_outputs.py"\n'
    )
    (folder / "tests" / "test_outputs.py").write_text(TEST_OUTPUTS)
    return folder


def test_a_terminal_bench_task_runs_end_to_end(terminal_ready: None, tmp_path: Path) -> None:
    folder = _task_folder(tmp_path, "hello-name", TERMINAL_IMAGE)
    (task,) = load_terminal_bench(tmp_path)
    assert task.task_id == "tb/hello-name" and task.image == "mte-tb-hello-name:latest"
    assert task.difficulty == "easy" and task.category == "file-operations"
    assert load_terminal_bench_task(folder, build=False).image == task.image  # built once
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False)
    try:
        obs, _ = env.reset(seed=0, options={"task_id": task.task_id})
        assert "greeting.txt" in obs
        assert env.check_report().score == 0.0  # two pytest tests, both failing
        obs, *_ = env.step("cat name.txt; ls /tmp/checks /tests 2>&1 | head -2")
        assert obs.startswith("world\n") and "No such file" in obs  # tests are not here
        _, _, _, _, info = env.step("echo 'hello, nobody' > greeting.txt")
        assert info["step_score"] == 0.5 and not info["success"]  # one of two tests
        _, _, _, _, info = env.step(task.solution[0])
        assert info["success"] and info["step_score"] == 1.0
    finally:
        env.close()
        subprocess.run(["docker", "rmi", "-f", task.image], capture_output=True, check=False)


def test_an_image_that_cannot_be_built_offline_is_reported_clearly(
    terminal_ready: None, tmp_path: Path
) -> None:
    folder = _task_folder(tmp_path, "needs-pull", "mte-no-such-base/ubuntu:24.04")
    with pytest.raises(ImageUnavailable, match="cannot be pulled offline") as err:
        load_terminal_bench_task(folder)
    assert "docker save" in str(err.value) and "mte-no-such-base/ubuntu:24.04" in str(err.value)
    with pytest.raises(ImageUnavailable, match="build=False"):
        load_terminal_bench_task(folder, build=False)


def test_malformed_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no task\.yaml"):
        load_terminal_bench_task(tmp_path)
    (tmp_path / "task.yaml").write_text("difficulty: easy\n")
    with pytest.raises(ValueError, match="instruction"):
        load_terminal_bench_task(tmp_path, image="x")
