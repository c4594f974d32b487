"""Harbor (Terminal-Bench 2) task folders in MT/Terminal-v0: task.toml, instruction.md,
environment/ as the build context, solution/solve.sh, tests at /tests and the verdict from
/logs/verifier/reward.txt or reward.json, with a Terminal-Bench 2 style test.sh (apt-get,
the uv installer, uvx with pytest and pytest-json-ctrf) served offline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from multiturn_envs.envs.terminal.env import TerminalEnv
from multiturn_envs.envs.terminal.harbor import load_harbor, load_harbor_task, task_variables
from multiturn_envs.envs.terminal.loading import NoTasksLoaded, TaskUnavailable
from multiturn_envs.envs.terminal.verify import verify_folder, verify_task
from multiturn_envs.sandbox.task_images import ImageUnavailable
from multiturn_envs.sandbox.terminal_image import terminal_image
from multiturn_envs.untrusted import Fields

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
    from multiturn_envs.sandbox.terminal_image import terminal_image

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
        assert loaded.causes == {"b-steps": "format", "c-compose": "services", "d-gpu": "gpu"}
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


def test_a_task_whose_prebuilt_image_is_absent_builds_its_dockerfile_as_harbor_does(
    terminal_ready: None, tmp_path: Path
) -> None:
    """Terminal-Bench 2.0's shape: a prebuilt ``docker_image`` this engine lacks and a
    one-stage Dockerfile on a base it cannot pull (the single-stage Dockerfile used to be
    planned as a light build before its base was mapped, and docker build then pulled it)."""
    toml = (
        'docker_image = "mte-no-such-registry.invalid/report:20251031"\n'
        '[environment.env]\nGREETING = "hello"\nTOKEN = "${MTE_TEST_TOKEN:-unset}"\n'
        '[verifier.env]\nGREETING = "from the verifier"\n'
    )
    folder = harbor_task(
        tmp_path,
        "prebuilt",
        "FROM python:3.13-slim-bookworm\nWORKDIR /srv/report\nCOPY n.txt /srv/report/n.txt\n",
        toml,
    )
    # what the tests see of the variables, kept beside the reward
    (folder / "tests" / "test.sh").write_text(
        'echo "$GREETING/$TOKEN" > /srv/report/seen 2>/dev/null; env | grep -q "^TOKEN=token-1$"'
        ' && [ "$GREETING" = "from the verifier" ] && echo 1 > /logs/verifier/reward.txt'
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    # a file of solution/ the reference solution reads from /solution, where Harbor puts it
    (folder / "solution" / "total.txt").write_text("7")
    (folder / "solution" / "solve.sh").write_text(
        '#!/bin/bash\nprintf \'{"total": %s}\' "$(cat /solution/total.txt)" > out.json\n'
    )
    task = load_harbor_task(folder, host_env={"MTE_TEST_TOKEN": "token-1"})
    try:
        assert task.solution_files == {"total.txt": b"7"} and len(task.solution) == 2
        assert task.build is None and task.image and task.image.startswith("mte-harbor-prebuilt:")
        notes = " | ".join(task.notes)
        prebuilt = "prebuilt image mte-no-such-registry.invalid/report:20251031 is not in the"
        assert f"{prebuilt} local engine" in notes
        assert f"FROM python:3.13-slim-bookworm mapped onto {terminal_image()}" in notes
        assert task.environment == {"GREETING": "hello", "TOKEN": "token-1"}
        assert task.verifier_environment == {"GREETING": "from the verifier", "TOKEN": "token-1"}
        assert task.agent_timeout_s == 300.0
        env = TerminalEnv(tasks=[task], max_turns=None, end_on_success=False)
        try:
            env.reset(seed=0, options={"task_id": task.task_id})
            obs, _, _, _, _ = env.step('echo "[$GREETING/$TOKEN]"; pwd; ls -A /solution | wc -l')
            assert "[hello/token-1]" in obs and "/srv/report" in obs
            assert "\n0\n" in obs  # /solution is there, empty: the agent never sees its files
            assert env.check_report().reward == 1.0  # the tests got [verifier].env over it
            for command in task.solution:  # the upload, then solve.sh
                env.step(command)
            assert json.loads(env.step("cat out.json")[0].split("\n")[0]) == {"total": 7}
        finally:
            env.close()
        # the host's variables reach a task only through host_env
        with pytest.raises(TaskUnavailable, match=r"\$\{MTE_NEEDED\}") as caught:
            task_variables(_section({"KEY": "${MTE_NEEDED}"}), None)
        assert caught.value.cause == "env"
        assert task_variables(_section({"K": "${MTE_TEST_TOKEN:-d}"}), None) == {"K": "d"}
    finally:
        subprocess.run(["docker", "rmi", "-f", str(task.image)], capture_output=True)
    # a prebuilt image the engine has is used as it is, with no build
    (folder / "task.toml").write_text(
        (folder / "task.toml")
        .read_text()
        .replace("mte-no-such-registry.invalid/report:20251031", terminal_image())
    )
    same = load_harbor_task(folder, host_env={"MTE_TEST_TOKEN": "x"})
    assert same.image == terminal_image() and same.build is None
    assert not any("prebuilt" in note for note in same.notes)
    # with neither the prebuilt image nor a Dockerfile, the task says what to bring
    (folder / "task.toml").write_text(
        (folder / "task.toml").read_text().replace(terminal_image(), "mte-absent.invalid/x:1")
    )
    (folder / "environment" / "Dockerfile").unlink()
    with pytest.raises(ImageUnavailable, match=r"docker save \| docker load") as refused:
        load_harbor_task(folder, host_env={"MTE_TEST_TOKEN": "x"})
    assert refused.value.cause == "base"


def test_verify_runs_the_reference_solution_under_the_task_agent_timeout(
    terminal_ready: None, tmp_path: Path
) -> None:
    """Harbor's oracle gets ``[agent].timeout_sec`` for the whole solution, not the env's
    per-command limit (here 2 s: the solution's 4 s command passes under a 30 s agent
    timeout and times out under a 3 s one, with the cause)."""
    folder = harbor_task(
        tmp_path, "slow", "ARG BASE=x\nFROM ${BASE}\nCOPY n.txt /srv/report/n.txt\n"
    )
    (folder / "solution" / "solve.sh").write_text(
        '#!/bin/bash\nsleep 4\ncd /srv/report\nprintf \'{"total": %s}\' "$(cat n.txt)" > out.json\n'
    )
    task = load_harbor_task(folder)
    row = verify_task(task, command_timeout_s=2)
    assert row.as_expected and row.cause == "" and row.solution_seconds >= 4, row
    short = folder / "task.toml"
    short.write_text(short.read_text().replace("timeout_sec = 300.0", "timeout_sec = 3.0"))
    row = verify_task(load_harbor_task(folder), command_timeout_s=2)
    assert not row.as_expected and row.reference_passes is False and row.cause == "timeout"
    assert "did not finish within 3 s" in row.detail


def test_a_solution_longer_than_a_command_runs_as_harbor_runs_it(
    terminal_ready: None, tmp_path: Path
) -> None:
    """A ``solve.sh`` with a 30,000-character here-document (write-compressor's is 25 KB) and a
    20 KB binary solution file: typed, the env refuses the command (longer than 20,000
    characters) and the reference fails; uploaded in pieces and run from ``/solution`` as
    ``bash``, as Harbor's oracle runs it, it passes, the file byte for byte."""
    import hashlib
    import random

    folder = harbor_task(  # a light build: no docker build, the test is about the solution
        tmp_path,
        "long",
        "ARG BASE=multiturn-envs-terminal:latest\nFROM ${BASE}\nCOPY n.txt /srv/report/n.txt\n",
    )
    blob = random.Random(0).randbytes(20_000)
    (folder / "solution" / "data.bin").write_bytes(blob)
    padding = "\n".join("x" * 99 for _ in range(300))
    (folder / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nset -e\ncat > /tmp/pad.txt <<'PAD'\n" + padding + "\nPAD\n"
        f'echo "{hashlib.sha256(blob).hexdigest()}  /solution/data.bin" | sha256sum -c\n'
        'cd /srv/report\nprintf \'{"total": %s}\' "$(cat n.txt)" > out.json\n'
    )
    task = load_harbor_task(folder)
    assert task.solution[-1] == "bash /solution/solve.sh"
    assert all(len(turn) <= 20_000 for turn in task.solution), [len(t) for t in task.solution]
    assert any("longer than 20,000 characters" in note for note in task.notes)
    row = verify_task(task)
    assert row.as_expected and row.cause == "", row


TB2_IN_CI = ("regex-log", "sqlite-db-truncate")
"""The real Terminal-Bench 2.0 tasks CI runs (the fastest that run offline on the lean image;
docs/envs/terminal.md has every task's verdict)."""


@pytest.mark.parametrize("name", TB2_IN_CI)
def test_real_terminal_bench_2_tasks_give_harbor_verdicts(
    terminal_ready: None, tb2_data: Path, name: str
) -> None:
    task = load_harbor_task(tb2_data / name)
    try:
        assert any("prebuilt image alexgshaw/" in note for note in task.notes)
        row = verify_task(task)
        assert row.as_expected, row
    finally:
        subprocess.run(["docker", "rmi", "-f", str(task.image)], capture_output=True)


def test_a_real_task_whose_build_needs_the_network_is_refused_with_its_cause(
    terminal_ready: None, tb2_data: Path
) -> None:
    with pytest.raises(ImageUnavailable) as caught:
        load_harbor_task(tb2_data / "fix-git")  # its setup.sh clones from GitHub
    assert caught.value.cause == "network"
    assert "RUN bash /app/setup.sh needs the network" in str(caught.value)
    rows = verify_folder(tb2_data / "fix-git")
    assert [(r.task_id, r.loaded, r.cause) for r in rows] == [("harbor/fix-git", False, "network")]


def _section(env: object) -> Fields:
    """``[environment]`` of a task.toml holding ``env``, as the loader reads it."""
    return Fields({"environment": {"env": env}}, where="task.toml").table("environment")


def test_hostile_variables_and_timeouts_are_refused_with_the_field(tmp_path: Path) -> None:
    for table, match in [
        (["A=1"], r"environment\.env must be a table"),
        ({"1A": "x"}, "not a variable name"),
        ({"A B": "x"}, "not a variable name"),
        ({"A": {"deep": "x"}}, r"environment\.env\.A must be a string"),
        ({"A": "x\0y"}, "NUL"),
        ({f"V{i}": "x" * 1000 for i in range(70)}, "more than"),
    ]:
        with pytest.raises(ValueError, match=match):
            task_variables(_section(table), None)
    # only a whole value is a template; text around one is taken as it is
    plain = task_variables(_section({"A": "a${B}", "N": 3, "F": True}), {"B": "x"})
    assert plain == {"A": "a${B}", "N": "3", "F": "true"}  # scalars as their TOML text
    folder = harbor_task(tmp_path, "t", "FROM x\n")
    toml = folder / "task.toml"
    good = toml.read_text()
    for bad in ("nan", "inf", "-1.0", "0.0", '"600"', "true"):
        agent = f"[agent]\ntimeout_sec = {bad}"
        toml.write_text(good.replace("[agent]\ntimeout_sec = 300.0", agent))
        with pytest.raises(ValueError, match=r"agent\.timeout_sec must be a number"):
            load_harbor_task(folder, image="x")
    toml.write_text(good)
    assert load_harbor_task(folder, image="x").agent_timeout_s == 300.0
    for memory, match in [
        ('memory_mb = "8G"', "whole number"),
        ("memory_mb = [1]", "whole number"),
        ("memory_mb = 1_000_000_000", "whole number from 16 to 65,536"),
        ('memory = "999999999999G"', "asks for"),
        ("memory_mb = 0", "whole number from 16"),
    ]:
        toml.write_text(good.replace("allow_internet = false", f"allow_internet = false\n{memory}"))
        with pytest.raises(ValueError, match=match):
            load_harbor_task(folder, image="x")
    toml.write_text(good.replace("allow_internet = false", 'allow_internet = false\nmemory = "4G"'))
    assert load_harbor_task(folder, image="x").memory_mb == 4096
