"""Hostile programs: each is contained and reported, the sandbox keeps working, nothing is left,
and each costs what the time rules say (counted in tests run and not run, and in the runner's
own per-test clock, never in host wall time, so a loaded machine cannot make them flaky).

Run against every backend; the docker run is the one that matters (CI runs it for real). The
local backend's containment is best effort (it is not a security boundary), so the checks that
only a container can pass (network without bubblewrap, kill -9 -1 as the runner's uid) are
docker-only or conditional.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from multiturn_envs.sandbox.base import RunLimits, RunResult, Sandbox, TestCase, TestKind
from multiturn_envs.sandbox.jobs import RUNNER_PATH
from multiturn_envs.testing import require
from multiturn_envs.testing.engines import host_processes

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_TESTS = [TestCase("stdio", f"{i} {i}", str(2 * i)) for i in range(3)]
FOUR_TESTS = [TestCase("stdio", f"{i} {i}", str(2 * i)) for i in range(4)]
FAST = RunLimits(timeout_s=1.0)
# the runner's clock overshoots a limit by its poll interval and the kill: generous slack
SLACK_S = 1.0


def _cost(result: RunResult) -> tuple[int, int, float]:
    """(tests run, tests not run, seconds the runner spent in tests) of one run."""
    assert result.error is None, result.error
    ran = [r for r in result.results if not r.not_run]
    return len(ran), result.n_not_run, sum(r.time_s for r in ran)


def _costs_one_limit(result: RunResult, limits: RunLimits) -> None:
    """The first test hit its limit; the others were not run, and say why."""
    ran, not_run, seconds = _cost(result)
    assert (ran, not_run) == (1, len(result.results) - 1), [r.error for r in result.results]
    assert result.results[0].timed_out and not result.results[0].passed
    assert all("exceeded its time limit" in (r.error or "") for r in result.results[1:])
    assert limits.timeout_s * 0.9 <= seconds <= limits.timeout_s + SLACK_S


def _token() -> str:
    """A unique ``sleep`` argument, so our leftovers can be found in the host's /proc."""
    return f"{uuid.uuid4().int % 10**6 + 10**6}.{os.getpid()}"


def _procs_with(token: str) -> list[int]:
    return host_processes(lambda line: token in line and "pytest" not in line)


def _still_works(sandbox: Sandbox) -> None:
    result = sandbox.run(ADD, ADD_TESTS)
    assert result.all_passed, (result.error, [r.error for r in result.results])


def test_fork_bomb(sandbox: Sandbox) -> None:
    token = _token()
    program = (
        "import os\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{token}'])\n"
    )
    result = sandbox.run(program, FOUR_TESTS, FAST)
    assert result.error is None
    assert all(not r.passed for r in result.results)
    _costs_one_limit(result, FAST)  # the bomb's last child sleeps: one limit, then stop
    assert _procs_with(token) == []
    _still_works(sandbox)


def test_memory_hog(sandbox: Sandbox) -> None:
    program = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))\n"
    limits = RunLimits(timeout_s=5.0, memory_mb=128)
    result = sandbox.run(program, ADD_TESTS[:2], limits)
    assert all(r.memory_killed and not r.passed for r in result.results), result
    assert "memory" in (result.results[0].error or "")
    # every test runs (no timeout), each stopped by the memory limit long before the time one
    ran, not_run, _ = _cost(result)
    assert (ran, not_run) == (2, 0)
    assert all(r.time_s < limits.timeout_s for r in result.results)
    _still_works(sandbox)


def test_infinite_loop_and_sleep_past_timeout(sandbox: Sandbox) -> None:
    for program in ("while True:\n    pass\n", "import time\ntime.sleep(60)\n"):
        result = sandbox.run(program, FOUR_TESTS, FAST)
        _costs_one_limit(result, FAST)
    _still_works(sandbox)


def test_after_timeout_continue_runs_every_test_at_its_limit(sandbox: Sandbox) -> None:
    """The behaviour before deadlines: one limit per test."""
    limits = RunLimits(timeout_s=0.5, after_timeout="continue")
    result = sandbox.run("import time\ntime.sleep(60)\n", FOUR_TESTS, limits)
    ran, not_run, seconds = _cost(result)
    assert (ran, not_run) == (4, 0)
    assert all(r.timed_out for r in result.results)
    assert 4 * limits.timeout_s * 0.9 <= seconds <= 4 * (limits.timeout_s + SLACK_S)


def test_deadline_caps_a_program_slow_on_every_test(sandbox: Sandbox) -> None:
    """Under its limit on every test, so only the submission's deadline stops it."""
    program = "import time\ntime.sleep(0.4)\na, b = map(int, input().split())\nprint(a + b)\n"
    tests = [TestCase("stdio", f"{i} {i}", str(2 * i)) for i in range(8)]
    limits = RunLimits(timeout_s=1.0, deadline_s=1.0)
    result = sandbox.run(program, tests, limits)
    ran, not_run, seconds = _cost(result)
    # 0.4 s a test: two pass, the third is cut at the deadline, the rest are not run
    assert 2 <= ran <= 3 and ran + not_run == 8, [r.error for r in result.results]
    assert result.n_passed == 2 and result.pass_rate == 2 / 8
    assert seconds <= limits.deadline_s + SLACK_S  # type: ignore[operator]
    assert all("deadline" in (r.error or "") for r in result.results[result.n_passed :])
    assert all(r.not_run for r in result.results[3:])
    # without the cap every test runs and passes
    assert sandbox.run(program, tests, RunLimits(timeout_s=1.0)).all_passed


def test_network_is_unreachable(sandbox: Sandbox, request: pytest.FixtureRequest) -> None:
    if sandbox.name == "local":
        require(
            getattr(sandbox, "bwrap", None) is not None,
            "bubblewrap (the local backend without it does not isolate the network)",
        )
    program = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('blocked', type(exc).__name__)\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    result = sandbox.run(program, [TestCase("stdio", "", "blocked OSError\n['lo']")], FAST)
    actual = result.results[0].actual
    assert "connected" not in actual and "blocked" in actual, actual
    assert "['lo']" in actual, actual


def test_writing_outside_the_work_dir(sandbox: Sandbox) -> None:
    targets = ["/evil.txt", "/usr/evil.txt", "/etc/passwd", str(RUNNER_PATH), "/job/runner.py"]
    program = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        with open(path, 'a') as f:\n"
        "            f.write('pwned')\n"
        "        print('WROTE', path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('fine.txt', 'w').write('the scratch directory is writable')\n"
        "print('done')\n"
    )
    result = sandbox.run(program, [TestCase("stdio", "", "done")], FAST)
    assert result.all_passed, result.results[0].actual
    assert not Path("/evil.txt").exists()
    assert "pwned" not in RUNNER_PATH.read_text()
    _still_works(sandbox)


def test_host_environment_is_invisible(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTE_CANARY_SECRET", "hunter2")
    program = "import os\nprint('\\n'.join(f'{k}={v}' for k, v in os.environ.items()))\n"
    result = sandbox.run(program, [TestCase("stdio", "", "")], FAST)
    actual = result.results[0].actual
    assert "hunter2" not in actual and "MTE_CANARY_SECRET" not in actual
    assert "PATH=" in actual


def test_output_flood(sandbox: Sandbox) -> None:
    program = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    result = sandbox.run(program, ADD_TESTS[:2], RunLimits(timeout_s=5.0))
    for r in result.results:
        assert not r.passed and r.error == "output limit exceeded"
        assert len(r.actual) < 70_000
        assert r.time_s < 4
    assert _cost(result)[:2] == (2, 0)  # killed at the cap, well before the time limit
    _still_works(sandbox)


# 65,536 writes of 64 KiB: 4 GiB per test if nothing stops it
STDERR_FLOOD = "import sys\nfor _ in range(65536):\n    sys.stderr.write('y' * 65536)\n"
RESULT_FLOOD = (
    "import os\ndef f(x):\n    for _ in range(65536):\n        os.write(3, b'[' * 65536)\n"
    "    return x\n"
)


@pytest.mark.parametrize(
    ("program", "kind", "stream"),
    [(STDERR_FLOOD, "stdio", "stderr"), (RESULT_FLOOD, "functional", "the result channel")],
)
def test_output_flood_on_other_streams_costs_what_stdout_costs(
    sandbox: Sandbox, program: str, kind: TestKind, stream: str
) -> None:
    """Bound: every stream of a test (stdout, stderr, the functional result channel) has the
    output cap; past it the test is stopped at once, so 4 GiB written to stderr by each of ten
    tests costs what a stdout flood costs (before, the runner drained all 40 GiB), not a run of
    every test to its end."""
    tests = [TestCase(kind, "[1]", "1", fn_name="f" if kind == "functional" else None)] * 10
    result = sandbox.run(program, tests, RunLimits(timeout_s=5.0))
    ran, not_run, _ = _cost(result)
    assert (ran, not_run) == (10, 0)
    for r in result.results:  # each stopped at the cap (the error says so), none drained
        assert not r.passed and not r.timed_out
        assert r.error == f"output limit exceeded ({stream})"
        assert len(r.stderr) < 70_000
    _still_works(sandbox)


def test_a_result_nested_past_what_json_reads_is_a_runtime_error(sandbox: Sandbox) -> None:
    """Bound: the functional result channel is parsed by the runner with its recursion caught:
    a program that writes 60,000 opening brackets there itself gets "nothing readable", not a
    runner error."""
    program = "import os\ndef f(x):\n    os.write(3, b'[' * 60000)\n    return x\n"
    result = sandbox.run(program, [TestCase("functional", "[1]", "1", fn_name="f")], FAST)
    (r,) = result.results
    assert not r.passed and r.error == "runtime error: the function returned nothing readable"
    _still_works(sandbox)


def test_killing_its_parent(sandbox: Sandbox) -> None:
    program = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(0)\n"
    result = sandbox.run(program, ADD_TESTS, FAST)
    assert result.error is None
    assert len(result.results) == 3 and not any(r.passed for r in result.results)
    _still_works(sandbox)
    # everything of the code's uid at once (the runner included, in a container)
    program = "import os, signal\nos.kill(-1, signal.SIGKILL)\n"
    result = sandbox.run(program, ADD_TESTS, FAST)
    assert not any(r.passed for r in result.results)
    _still_works(sandbox)


def test_background_processes_are_killed(sandbox: Sandbox) -> None:
    token = _token()
    program = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{token}'])\n"
        "    os._exit(0)\n"
        "a, b = map(int, input().split())\n"
        "print(a + b)\n"
    )
    result = sandbox.run(program, ADD_TESTS, FAST)
    assert result.all_passed, [r.error for r in result.results]
    assert _procs_with(token) == []
    _still_works(sandbox)


def test_reading_the_tests_is_impossible(sandbox: Sandbox) -> None:
    program = (
        "import glob\n"
        "hits = []\n"
        "for path in glob.glob('/job/**', recursive=True) + glob.glob('/tmp/**', recursive=True):\n"
        "    try:\n"
        "        if 'SECRET-' + 'EXPECTED' in open(path, errors='replace').read():\n"
        "            hits.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(hits)\n"
    )
    result = sandbox.run(program, [TestCase("stdio", "", "SECRET-EXPECTED")], FAST)
    assert result.results[0].actual.strip() == "[]"


@pytest.mark.docker
def test_no_container_is_left_after_close(docker_ready: None) -> None:
    import docker

    from multiturn_envs.sandbox.docker_pool import DockerSandbox

    sandbox = DockerSandbox(size=1)
    assert sandbox.run(ADD, ADD_TESTS).all_passed
    ids = sandbox.container_ids()
    assert len(ids) == 1
    sandbox.close()
    sandbox.close()
    client = docker.from_env()
    alive = {c.id for c in client.containers.list(all=True)}
    assert not set(ids) & alive
