"""The docker pool under many callers: one shared pool per process, first-come-first-served
waiting, back-pressure, and the guards that end a job the runner cannot (a stopped runner, a
container out of memory)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from multiturn_envs.sandbox import make_sandbox
from multiturn_envs.sandbox.base import RunLimits, TestCase
from multiturn_envs.sandbox.docker_pool import (
    SIZE_VARIABLE,
    DockerSandbox,
    PoolSaturated,
    default_pool_size,
)

ECHO = "print(input())\n"


def _echo(i: int) -> list[TestCase]:
    return [TestCase("stdio", str(i), str(i))]


def test_default_pool_size_follows_the_machine_and_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SIZE_VARIABLE, raising=False)
    assert default_pool_size() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(SIZE_VARIABLE, "3")
    assert default_pool_size() == 3
    assert DockerSandbox().size == 3
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(SIZE_VARIABLE, bad)
        with pytest.raises(ValueError, match=SIZE_VARIABLE):
            default_pool_size()
    with pytest.raises(ValueError, match="size"):
        DockerSandbox(size=0)


def test_shared_is_one_pool_per_configuration_and_survives_close() -> None:
    """No engine needed: pools start their containers lazily."""
    try:
        pool = DockerSandbox.shared()
        assert DockerSandbox.shared() is pool
        assert DockerSandbox.shared(size=pool.size) is pool  # the default size, resolved
        assert make_sandbox("docker", shared=True) is pool
        assert DockerSandbox.shared(size=pool.size + 1) is not pool
        assert pool.is_shared and not DockerSandbox().is_shared
        pool.close()  # a user's close: the other users keep their pool
        assert not pool.closed and DockerSandbox.shared() is pool
        with pytest.raises(TypeError, match="provider"):
            DockerSandbox.shared(provider=object())
    finally:
        DockerSandbox.shutdown_shared()
    assert pool.closed
    fresh = DockerSandbox.shared()
    assert fresh is not pool and not fresh.closed
    DockerSandbox.shutdown_shared()


@pytest.fixture
def one_container(docker_ready: None) -> Iterator[DockerSandbox]:
    with DockerSandbox(size=1) as sandbox:
        yield sandbox


@pytest.mark.docker
def test_waiting_submissions_are_served_in_arrival_order(one_container: DockerSandbox) -> None:
    assert one_container.run(ECHO, _echo(0)).all_passed  # the container is warm
    finished: list[int] = []
    lock = threading.Lock()

    def submit(i: int) -> None:
        result = one_container.run("import time\ntime.sleep(0.3)\n" + ECHO, _echo(i))
        assert result.all_passed, result
        with lock:
            finished.append(i)

    threads = []
    for i in range(5):  # each arrives while the one before is running or waiting
        threads.append(threading.Thread(target=submit, args=(i,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while one_container.stats()["waiting"] < i and time.monotonic() < deadline:
            time.sleep(0.005)
    for thread in threads:
        thread.join(60)
    assert finished == [0, 1, 2, 3, 4]
    stats = one_container.stats()
    assert stats["containers"] == 1 and stats["most_waiting"] >= 4 and stats["waiting"] == 0


@pytest.mark.docker
def test_max_waiting_refuses_at_once(docker_ready: None) -> None:
    with DockerSandbox(size=1, max_waiting=0) as sandbox:
        assert sandbox.run(ECHO, _echo(0)).all_passed
        slow = threading.Thread(target=sandbox.run, args=("import time\ntime.sleep(2)\n", _echo(1)))
        slow.start()
        while sandbox.stats()["idle"] > 0:
            time.sleep(0.005)
        started = time.monotonic()
        result = sandbox.run(ECHO, _echo(2))
        assert time.monotonic() - started < 1.5  # refused, not queued behind the 2 s job
        assert result.error is not None and "saturated" in result.error
        with pytest.raises(PoolSaturated):
            sandbox._acquire()
        slow.join(30)
        assert sandbox.run(ECHO, _echo(3)).all_passed


@pytest.mark.docker
def test_sixty_four_callers_share_two_containers(docker_ready: None) -> None:
    results: dict[int, bool] = {}
    with DockerSandbox(size=2) as sandbox:

        def submit(i: int) -> None:
            results[i] = sandbox.run(ECHO, _echo(i)).all_passed

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(64)]
        for thread in threads:
            thread.start()
        most = 0
        while any(t.is_alive() for t in threads):
            most = max(most, len(sandbox.container_ids()))
            time.sleep(0.01)
        assert results == dict.fromkeys(range(64), True)
        assert most <= 2 and sandbox.stats()["runs"] == 64


@pytest.mark.docker
def test_a_stopped_runner_is_given_up_after_the_host_guard(docker_ready: None) -> None:
    """The runner's own alarm cannot fire in a stopped process: the host-side guard must."""
    stop_the_runner = (
        "import os, signal\n"
        "def parent(pid):\n"
        "    return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "os.kill(parent(os.getppid()), signal.SIGSTOP)  # the zygote's parent: the runner\n"
        "print('stopped it')\n"
    )
    limits = RunLimits(timeout_s=0.5, deadline_s=0.5)
    with DockerSandbox(size=1, guard_slack_s=0.5) as sandbox:
        assert sandbox.run(ECHO, _echo(0)).all_passed
        (stopped,) = sandbox.container_ids()
        started = time.monotonic()
        result = sandbox.run(stop_the_runner, [TestCase("stdio", "", "stopped it")], limits)
        waited = time.monotonic() - started
        assert result.error is not None and "time guard" in result.error, result
        assert waited >= 10.0  # the job's guard (its deadline + 10 s) then the host's slack
        assert stopped not in sandbox.container_ids()  # replaced, not reused
        assert sandbox.run(ECHO, _echo(1)).all_passed


@pytest.mark.docker
def test_a_container_out_of_memory_is_reported_and_replaced(docker_ready: None) -> None:
    """A test too big for the container's memory: the runner reading it is OOM-killed."""
    huge = TestCase("stdio", "x" * (96 << 20), "x")
    with DockerSandbox(size=1, memory_mb=48) as sandbox:
        assert sandbox.run(ECHO, _echo(0)).all_passed
        (first,) = sandbox.container_ids()
        result = sandbox.run(ECHO, [huge], RunLimits(timeout_s=5.0))
        assert result.error is not None and "ran out of memory" in result.error, result
        assert first not in sandbox.container_ids()
        assert sandbox.run(ECHO, _echo(1)).all_passed


def test_a_forked_child_gets_its_own_shared_pool() -> None:
    """The child must never use (or, at its exit, remove) its parent's containers."""
    try:
        parent_pool = DockerSandbox.shared()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running atexit handlers
            ok = DockerSandbox.shared() is not parent_pool and not parent_pool.closed
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.close(read)
        os.waitpid(pid, 0)
        assert answer == b"1"
        assert DockerSandbox.shared() is parent_pool
    finally:
        DockerSandbox.shutdown_shared()
