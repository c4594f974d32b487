"""Harbor (Terminal-Bench 2) task folders in MT/Terminal-v0: task.toml, instruction.md,
environment/ as the build context, solution/solve.sh, tests at /tests and the verdict from
/logs/verifier/reward.txt or reward.json, with a Terminal-Bench 2 style test.sh (apt-get,
the uv installer, uvx with pytest and pytest-json-ctrf) served offline."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.envs.terminal.harbor import load_harbor, load_harbor_task
from multiturn_envs.envs.terminal.loading import NoTasksLoaded, TaskUnavailable

pytestmark = [
    pytest.mark.docker,
    pytest.mark.timeout(1800),
]  # builds images, trains or runs a server: long

TEST_SH = """\
#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
set +e
uvx \\
  -p 3.13 \\
  -w pytest==8.4.1 \\
  -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
TEST_OUTPUTS = """\
import json
from pathlib import Path


def test_report():
    data = json.loads(Path("/srv/report/out.json").read_text())
    assert data == {"total": int(Path("/srv/report/n.txt").read_text())}
"""


def harbor_task(root: Path, name: str, dockerfile: str, toml: str = "") -> Path:
    folder = root / name
    for sub in ("environment", "solution", "tests"):
        (folder / sub).mkdir(parents=True)
    (folder / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\ndifficulty = "medium"\ncategory = "data"\n\n'
        "[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 300.0\n\n"
        "[environment]\nallow_internet = false\n" + toml
    )
    (folder / "instruction.md").write_text(
        "Write /srv/report/out.json: a JSON object whose `total` is the number in n.txt.\n"
    )
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "environment" / "n.txt").write_text("7")
    (folder / "solution" / "solve.sh").write_text(
        '#!/bin/bash\ncd /srv/report\n# --- next turn ---\nprintf \'{"total": %s}\' "$(cat n.txt)"'
        " > out.json\n"
    )
    (folder / "tests" / "test.sh").write_text(TEST_SH)
    (folder / "tests" / "test_outputs.py").write_text(TEST_OUTPUTS)
    return folder


def test_a_harbor_task_runs_with_its_reward_file(terminal_ready: None, tmp_path: Path) -> None:
    # environment/ is the build context; /srv is outside /app and created by the build: the
    # agent (root, the image's user) writes there, the tests read it
    folder = harbor_task(
        tmp_path,
        "report",
        "ARG BASE=multiturn-envs-terminal:latest\nFROM ${BASE}\n"
        "COPY n.txt /srv/report/n.txt\nWORKDIR /srv/report\n",
    )
    task = load_harbor_task(folder)
    assert task.task_id == "harbor/report" and task.verdict == "reward-file"
    assert task.solution == ("cd /srv/report", 'printf \'{"total": %s}\' "$(cat n.txt)" > out.json')
    assert task.check_timeout_s == 60.0 and task.difficulty == "medium"
    assert task.build is not None and task.build.light  # no docker build needed
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False)
    try:
        obs, _ = env.reset(seed=0, options={"task_id": task.task_id})
        assert "/srv/report" in obs and env.prepared().root
        assert "/srv" in env.prepared().layout.paths
        assert env.check_report().reward == 0.0
        # the agent's own /logs/verifier/reward.txt is not the checker's
        obs, _, _, _, info = env.step(
            "mkdir -p /logs/verifier 2>&1; echo 1 > /logs/verifier/reward.txt 2>&1;"
            " echo '{\"total\": 6}' > out.json"
        )
        assert info["step_score"] == 0.0 and not info["success"]
        for command in task.solution:
            _, _, _, _, info = env.step(command)
        report = env.check_report()
        assert info["success"] and report.reward == 1.0, report
        # the offline stand-ins served uvx, pytest-json-ctrf and the uv installer
        assert "1 passed" in report.outputs[0] and "mte-offline" in report.outputs[0]
    finally:
        env.close()


def test_reward_json_wins_and_a_partial_reward_is_the_step_score(
    terminal_ready: None, tmp_path: Path
) -> None:
    folder = harbor_task(
        tmp_path, "partial", "ARG BASE=x\nFROM ${BASE}\nRUN mkdir -p /srv/report\n"
    )
    (folder / "tests" / "test.sh").write_text(
        "#!/bin/bash\nn=$(ls /srv/report | wc -l)\n"
        'echo 0 > /logs/verifier/reward.txt\necho "{\\"reward\\": 0.$n}" > '
        "/logs/verifier/reward.json\n"
    )
    task = load_harbor_task(folder)
    env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False)
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        _, _, _, _, info = env.step("touch /srv/report/a /srv/report/b /srv/report/c")
        assert info["step_score"] == pytest.approx(0.3) and not info["success"]
    finally:
        env.close()


def test_a_heavy_dockerfile_is_built_and_unrunnable_tasks_say_why(
    terminal_ready: None, tmp_path: Path
) -> None:
    from multiturn_envs.envs.terminal.image import terminal_image

    # SHELL needs docker build; the base cannot be pulled, so FROM is mapped (and said so)
    heavy = harbor_task(
        tmp_path,
        "a-heavy",
        'FROM mte-no-such-registry.invalid/ubuntu:24.04\nSHELL ["/bin/bash", "-c"]\n'
        "RUN mkdir -p /srv/report && cp /etc/hostname /srv/report/x 2>/dev/null; true\n"
        "COPY n.txt /srv/report/n.txt\n",
    )
    multi = harbor_task(tmp_path, "b-steps", "FROM x\n")
    (multi / "steps").mkdir()
    compose = harbor_task(tmp_path, "c-compose", "FROM x\n")
    (compose / "environment" / "docker-compose.yaml").write_text("services: {main: {}}\n")
    gpu = harbor_task(tmp_path, "d-gpu", "FROM x\n", toml="gpus = 1\n")
    with pytest.warns(UserWarning, match="left out"):
        loaded = load_harbor(tmp_path)
    try:
        assert [t.task_id for t in loaded] == ["harbor/a-heavy"]
        (task,) = loaded
        assert task.build is None and task.image and task.image.startswith("mte-harbor-a-heavy:")
        assert any(f"mapped onto {terminal_image()}" in note for note in task.notes)
        assert "multi-step" in loaded.problems["b-steps"]
        assert "docker-compose" in loaded.problems["c-compose"]
        assert "GPU" in loaded.problems["d-gpu"]
        with pytest.raises(TaskUnavailable, match="base image"):
            load_harbor_task(heavy, map_base=False)
    finally:
        for t in loaded:
            subprocess.run(["docker", "rmi", "-f", str(t.image)], capture_output=True)
    for folder in (multi, compose, gpu):
        assert folder.is_dir()
    with pytest.raises(NoTasksLoaded, match=r"a task is a folder with a task\.toml"):
        load_harbor(tmp_path / "b-steps" / "steps")


def test_malformed_harbor_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no task\.toml"):
        load_harbor_task(tmp_path)
    (tmp_path / "task.toml").write_text("version = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_harbor_task(tmp_path)
    (tmp_path / "task.toml").write_text('version = "1.0"\n')
    with pytest.raises(ValueError, match=r"instruction\.md"):
        load_harbor_task(tmp_path)
    (tmp_path / "instruction.md").write_text("Do it.\n")
    with pytest.raises(ValueError, match=r"tests/test\.sh"):
        load_harbor_task(tmp_path, image="x")
