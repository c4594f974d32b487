"""Terminal-Bench 1 tasks in MT/Terminal-v0: run as Terminal-Bench runs them (tests copied INTO
``$TEST_DIR``, the image's ``WORKDIR`` and user, the pytest summary as the verdict, the test
scripts' uv/pytest downloads served offline), real tasks from ``../shared/data``, and every
task that cannot run here reported with its cause, never dropped in silence."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import pytest

from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.envs.terminal.loading import NoTasksLoaded, TaskUnavailable
from multiturn_envs.envs.terminal.terminal_bench import (
    load_terminal_bench,
    load_terminal_bench_task,
)
from multiturn_envs.envs.terminal.verify import verify_task
from multiturn_envs.sandbox.task_images import ImageUnavailable
from multiturn_envs.sandbox.terminal_image import terminal_image

pytestmark = [
    pytest.mark.docker,
    pytest.mark.timeout(1800),
]  # builds images, trains or runs a server: long

# Terminal-Bench's own test scaffolding (tests/setup-uv-pytest.sh, tests/run-uv-pytest.sh)
SETUP_UV = """\
#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set."
    exit 1
fi
uv init
uv add pytest==8.4.1
"""
RUN_UV = "#! /bin/bash\n\nuv run pytest $TEST_DIR/test_outputs.py -rA\n"
TEST_OUTPUTS = """\
import sys
from pathlib import Path


def test_greeting_exists():
    assert Path("/app/work/greeting.txt").exists()


def test_greeting_text():
    text = Path("/app/work/greeting.txt").read_text()
    assert text == "hello, " + Path("/app/work/name.txt").read_text()


def test_helper_module():
    sys.path.insert(0, "/app/work")
    import helper  # the agent's module, imported by the tests (as many tasks do)

    assert helper.VALUE == 42
"""
COMPOSE = """\
services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
"""


def tb_task(root: Path, name: str, dockerfile: str, **files: str) -> Path:
    """A Terminal-Bench 1 task folder in Terminal-Bench's layout."""
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "task.yaml").write_text(
        "instruction: |-\n  Write 'hello, ' and the content of name.txt to greeting.txt, and a\n"
        "  module helper.py with VALUE = 42.\ndifficulty: easy\ncategory: file-operations\n"
        "parser_name: pytest\nmax_agent_timeout_sec: 360.0\nmax_test_timeout_sec: 60.0\n"
    )
    (folder / "Dockerfile").write_text(dockerfile)
    (folder / "docker-compose.yaml").write_text(COMPOSE)
    (folder / "run-tests.sh").write_text(
        "#!/bin/bash\n\nsource $TEST_DIR/setup-uv-pytest.sh\nbash $TEST_DIR/run-uv-pytest.sh\n"
    )
    (folder / "tests" / "setup-uv-pytest.sh").write_text(SETUP_UV)
    (folder / "tests" / "run-uv-pytest.sh").write_text(RUN_UV)
    (folder / "tests" / "test_outputs.py").write_text(TEST_OUTPUTS)
    (folder / "solution.sh").write_text(
        "#!/bin/bash\nprintf 'hello, %s' \"$(cat name.txt)\" > greeting.txt\n"
        "echo 'VALUE = 42' > helper.py\n"
    )
    for path, content in files.items():
        (folder / path).write_text(content)
    return folder


def _remove_image(tag: str | None) -> None:
    if tag:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def test_a_task_runs_as_terminal_bench_runs_it(terminal_ready: None, tmp_path: Path) -> None:
    dockerfile = (
        "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\n"
        "RUN apt-get update && apt-get install -y git\n"
        "COPY name.txt /app/work/\nWORKDIR /app/work\n"
    )
    folder = tb_task(tmp_path, "hello-name", dockerfile, **{"name.txt": "world"})
    task = load_terminal_bench_task(folder)
    assert task.task_id == "tb/hello-name" and task.verdict == "pytest-summary"
    assert set(task.tests) == {
        "run-tests.sh",
        "setup-uv-pytest.sh",
        "run-uv-pytest.sh",
        "test_outputs.py",
    }  # tests/ copied INTO $TEST_DIR
    assert any("mapped onto" in n for n in task.notes)  # the base cannot be pulled here
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False)
    try:
        obs, _ = env.reset(seed=0, options={"task_id": task.task_id})
        assert "/app/work" in obs
        obs, *_ = env.step("id -u; pwd; echo $TEST_DIR; ls /tests 2>&1; cat name.txt")
        assert obs.startswith("0\n/app/work\n/tests\nls: cannot access '/tests'")  # root, WORKDIR
        assert obs.split("\n")[4] == "world"
        # the tests import the agent's module: one that ends the test process with status 0
        # leaves no pytest summary, and fails (the exit status of run-tests.sh decides nothing)
        _, _, _, _, info = env.step(
            "printf 'hello, world' > greeting.txt; printf 'import os\\nos._exit(0)\\n' > helper.py"
        )
        report = env.check_report()
        assert not info["success"] and report.note and "no pytest summary" in report.note
        # a program that prints PASSED lines (even a fake summary) does not pass either
        env.step(
            'printf \'print("=== short test summary info ===\\\\nPASSED t.py::test_helper_module")'
            "\\nVALUE = 41\\n' > helper.py"
        )
        report = env.check_report()
        assert not report.all_passed and report.score == pytest.approx(2 / 3), report
        # a root agent's state is read by its box's keeper, started before the agent's first
        # command: a preload the agent plants reaches no program of the keeper's
        assert env._episode is not None and env._episode.keeper is not None
        obs, *_ = env.step("echo /nonexistent.so > /etc/ld.so.preload; echo planted")
        assert obs.startswith("planted\n") and env._episode.keeper is not None
        assert env._episode.keeper.alive
        _, _, _, _, info = env.step(task.solution[0])
        assert info["success"] and info["step_score"] == 1.0, env.check_report()
        assert env.check_report().names == (
            "test_greeting_exists",
            "test_greeting_text",
            "test_helper_module",
        )
    finally:
        env.close()
        _remove_image(task.image)


@pytest.mark.parametrize(
    "name", ["processing-pipeline", "decommissioning-service-with-sensitive-data"]
)
def test_real_terminal_bench_tasks_pass_with_their_reference_solution(
    terminal_ready: None, tb1_data: Path, name: str
) -> None:
    """Two of the ten real tasks (hello-world's layout is the synthetic task's above): a
    root-owned ``chmod 000`` directory outside /app and a pipeline of scripts; files to encrypt,
    shred and delete in /opt, /etc and /tmp."""
    task = load_terminal_bench_task(tb1_data / name)
    row = verify_task(task)
    assert row.loaded and row.reference_passes and row.empty_fails, row


def test_a_task_whose_build_needs_the_network_says_so(terminal_ready: None, tb1_data: Path) -> None:
    with pytest.raises(ImageUnavailable) as caught:
        load_terminal_bench_task(tb1_data / "fix-git")  # its setup clones from GitHub
    assert caught.value.cause == "network"
    assert "RUN bash /app/setup.sh needs the network" in str(caught.value)
    assert "Could not resolve host: github.com" in str(caught.value)


def _leftovers(log: str) -> list[str]:
    """The build's intermediate containers and images that still exist."""
    import re

    from multiturn_envs.sandbox.task_images import _created_images

    ids = [("container", c) for c in re.findall(r"---> Running in ([0-9a-f]{12})", log)]
    ids += [("image", i) for i in _created_images(log)]
    assert ids, log  # the build ran steps
    return [
        ident
        for kind, ident in ids
        if subprocess.run(["docker", kind, "inspect", ident], capture_output=True).returncode == 0
    ]


def test_each_task_that_cannot_run_is_reported_with_its_cause(
    terminal_ready: None, tmp_path: Path
) -> None:
    base = terminal_image()
    tb_task(
        tmp_path,
        "a-good",
        f"FROM {base}\nCOPY name.txt /app/work/\nWORKDIR /app/work\n",
        **{"name.txt": "x"},
    )
    tb_task(tmp_path, "b-network", f"FROM {base}\nRUN curl -fsS https://example.com/x > /x\n")
    tb_task(tmp_path, "c-command", f"FROM {base}\nRUN no-such-tool --setup\n")
    tb_task(tmp_path, "d-base", "FROM mte-no-such-registry.invalid/base:1\n")
    tb_task(tmp_path, "e-parser", f"FROM {base}\n")
    (tmp_path / "e-parser" / "task.yaml").write_text(
        "instruction: x\ndifficulty: easy\nparser_name: swebench\n"
    )
    tb_task(tmp_path, "f-malformed", f"FROM {base}\n")
    (tmp_path / "f-malformed" / "task.yaml").write_text("difficulty: easy\n")
    with pytest.warns(UserWarning, match="left out"):
        loaded = load_terminal_bench(tmp_path, map_base=False)
    try:
        assert [t.task_id for t in loaded] == ["tb/a-good"]
        problems = loaded.problems
        assert set(problems) == {"b-network", "c-command", "d-base", "e-parser", "f-malformed"}
        assert "needs the network" in problems["b-network"]
        assert "no-such-tool is not in the base image" in problems["c-command"]
        assert "cannot be pulled" in problems["d-base"] and "docker save" in problems["d-base"]
        assert "swebench" in problems["e-parser"] and "instruction" in problems["f-malformed"]
        # a failed build leaves no container behind (--force-rm) and no intermediate image
        with pytest.raises(TaskUnavailable) as caught:
            load_terminal_bench_task(tmp_path / "c-command")
        assert caught.value.log and not _leftovers(caught.value.log)
    finally:
        for task in loaded:
            _remove_image(task.image)
    # nothing that can run: an error naming every cause, never an empty list
    for name in ("a-good",):
        subprocess.run(["rm", "-rf", str(tmp_path / name)], check=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NoTasksLoaded, match=r"b-network: .*needs the network"):
            load_terminal_bench(tmp_path, map_base=False)
    with pytest.raises(NoTasksLoaded, match=r"a task is a folder with a task\.yaml"):
        load_terminal_bench(tmp_path / "f-malformed" / "tests")


def test_malformed_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no task\.yaml"):
        load_terminal_bench_task(tmp_path)
    (tmp_path / "task.yaml").write_text("difficulty: easy\n")
    with pytest.raises(ValueError, match="instruction"):
        load_terminal_bench_task(tmp_path, image="x")
    (tmp_path / "task.yaml").write_text("instruction: x\n")
    with pytest.raises(ValueError, match=r"run-tests\.sh"):
        load_terminal_bench_task(tmp_path, image="x")
    (tmp_path / "run-tests.sh").write_text("true\n")
    (tmp_path / "solution.sh").write_text("true\n")
    for bad in (".nan", ".inf", "-5", "0", "'360'"):
        (tmp_path / "task.yaml").write_text(f"instruction: x\nmax_agent_timeout_sec: {bad}\n")
        with pytest.raises(ValueError, match="max_agent_timeout_sec must be a number over 0"):
            load_terminal_bench_task(tmp_path, image="x")
    (tmp_path / "task.yaml").write_text("instruction: x\nmax_test_timeout_sec: 12\n")
    task = load_terminal_bench_task(tmp_path, image="x")
    assert (task.agent_timeout_s, task.check_timeout_s) == (360.0, 12.0)  # TB's default, its own
