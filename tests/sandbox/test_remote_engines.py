"""Both sandboxed envs on a Docker engine elsewhere: a second ``dockerd`` of the tests' own.

:class:`~multiturn_envs.testing.engines.SecondEngine` starts it in a network namespace joined by a
veth pair (another host on a private link), with TLS certificates made on the fly and an
``sshd`` beside it; this module reaches it over TCP+TLS (with ``REQUESTS_CA_BUNDLE`` and
``CURL_CA_BUNDLE`` set, as on many machines) and over SSH, and checks on it: the images sent
there offline (``save``/``load``, current by their recipe digest), DeepCoder and Terminal
episodes, the hardening (no network, read-only root, pids and memory limits, OOM events),
placement over two engines with no container left on either, a Terminal snapshot taken on this
machine's engine continuing on the remote one, 50 ms of ``tc netem`` latency, and the engine
killed mid-episode (a clear ``EngineGone``, the episode restored elsewhere from its snapshot).

It needs root, ``ip``/``nsenter``/``tc``, ``dockerd``, OpenSSH's server and the images; without
them it skips with the reason, never under ``CI=true``. The engine is started once for the
module (about 10 s, plus sending the images once) and stopped with everything it made.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from multiturn_envs.sandbox.base import RunLimits, TestCase
from multiturn_envs.sandbox.docker_engine import ENGINE_LABEL, DockerEngine
from multiturn_envs.sandbox.engine import IMAGE
from multiturn_envs.sandbox.engines import EngineAddress, connect
from multiturn_envs.sandbox.provider import BoxSpec, EngineGone, ResourceLimits
from multiturn_envs.testing import require, require_docker, require_terminal_image
from multiturn_envs.testing.engines import SecondEngine, second_engine_problem

pytestmark = pytest.mark.docker

TASK = "csv-column-sum"


@pytest.fixture(scope="module")
def second() -> Iterator[SecondEngine]:
    require_docker()
    require_terminal_image()
    problem = second_engine_problem(ssh=True, latency=True)
    require(problem is None, f"a second Docker engine ({problem})")
    engine = SecondEngine(ssh=True)
    engine.start()
    try:
        yield engine
    finally:
        DockerEngine.close_shared()  # the shared handles of this engine go with it
        engine.stop()


@pytest.fixture
def ca_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables that made every TLS engine fail before (the issue's first finding)."""
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", bundle)
    monkeypatch.setenv("CURL_CA_BUNDLE", bundle)


def _ours_on(engine: DockerEngine) -> list[str]:
    """Containers of this process's engine handle still on ``engine``."""
    # the low-level list: the SDK's containers.list inspects each one after listing, which
    # fails on a container the reaper removes in between
    found = engine.api.containers(
        all=True, quiet=True, filters={"label": f"multiturn-envs.owner={engine.owner}"}
    )
    return [str(c["Id"]) for c in found]


def _wait_none_left(
    engine: DockerEngine, timeout_s: float = 30.0, among: set[str] | None = None
) -> None:
    """Until none of this process's containers (or of ``among``: ids) is left on ``engine``;
    on this machine's engine, pass ``among``: earlier tests' warm pools of this process live
    there by design."""

    def left() -> list[str]:
        return [i for i in _ours_on(engine) if among is None or i in among]

    deadline = time.monotonic() + timeout_s
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left() == []


def test_tls_and_ssh_reach_the_engine_whatever_ca_the_environment_names(
    second: SecondEngine, ca_variables: None
) -> None:
    assert os.environ["REQUESTS_CA_BUNDLE"]
    for text in (second.tls_address(), second.ssh_address()):
        client, close = connect(EngineAddress.parse(text), timeout_s=30)
        try:
            assert client.ping()
            # the engine answering is the second one, not this machine's
            assert client.info()["DockerRootDir"].startswith(str(second.folder))
        finally:
            close()


def test_deepcoder_runs_on_the_remote_engine_with_its_image_sent_offline(
    second: SecondEngine, ca_variables: None
) -> None:
    from multiturn_envs.sandbox.docker_pool import DockerSandbox

    tls = second.tls_address("remote-tls")
    with DockerSandbox(size=1, engines=[tls]) as sandbox:
        result = sandbox.run(
            "print(sum(map(int, input().split())))", [TestCase("stdio", "2 3", "5")]
        )
        assert result.all_passed, result
        engine = DockerEngine.shared(tls)
        local = DockerEngine.shared("local")
        # the image was sent (save/load keeps the id) and judged current there
        remote_id = engine.client.images.get(IMAGE).id
        assert remote_id == local.client.images.get(IMAGE).id
        (box_id,) = engine.box_ids()
        labels = engine.client.containers.get(box_id).labels
        assert labels[ENGINE_LABEL] == "remote-tls"
        # a slow program is still stopped at its own limit over the link
        result = sandbox.run(
            "import time\ntime.sleep(30)",
            [TestCase("stdio", "", "")],
            RunLimits(timeout_s=1.0),
        )
        assert result.results[0].timed_out and result.results[0].time_s < 5
    _wait_none_left(DockerEngine.shared(tls))


def test_the_hardening_holds_on_the_remote_engine(second: SecondEngine) -> None:
    engine = DockerEngine.shared(second.ssh_address("remote-ssh"))
    engine.ensure_image(IMAGE)
    box = engine.create(
        BoxSpec(image=IMAGE, limits=ResourceLimits(memory_mb=64, cpus=1.0, pids_limit=24))
    )
    try:
        user = "65534:65534"

        def sh(script: str) -> tuple[int | None, str]:
            done = box.exec(["sh", "-c", script], user=user, timeout_s=30, output_cap=4096)
            return done.exit_code, done.output.decode(errors="replace")

        code, out = sh(
            f"python3 -c \"import socket; socket.create_connection(('{second.peer_ip}', 22), 2)\""
        )
        assert code != 0 and "unreachable" in out.lower(), out  # no interface but loopback
        code, out = sh("touch /etc/x || touch /x")
        assert code != 0 and "Read-only" in out
        start = time.time()
        code, out = sh('python3 -c "x = bytearray(256 << 20)"')
        assert code == 137, (code, out)  # killed by the box's memory limit
        assert box.oom_since(start)  # ... and the engine reported it as an OOM kill
        code, out = sh("for i in $(seq 60); do sleep 2 & done; wait")
        assert "fork" in out.lower() or "resource temporarily unavailable" in out.lower(), out
        assert box.alive()
    finally:
        box.close()
    _wait_none_left(engine)


def test_placement_follows_load_over_two_engines_and_leaves_nothing(
    second: SecondEngine,
) -> None:
    """Load is running containers (the engine's own count, others' included) per capacity: the
    empty remote engine (capacity 2, listed first: it wins a tie) takes the first box; then
    this machine's engine, whose containers (fewer than 500, whoever runs them) over a
    capacity of 1000 weigh less than the remote's 1 of 2, takes the rest."""
    from multiturn_envs.sandbox.engine_set import EngineSet

    remote = second.tls_address("remote-tls") + "&capacity=2"
    engines = EngineSet([remote, "local?name=here&capacity=1000"])
    spec = BoxSpec(image=IMAGE, limits=ResourceLimits(memory_mb=64))
    boxes = []
    seen = {e.name: (e.live_boxes(), engines._running(e), e.capacity) for e in engines.engines}
    try:
        for _ in range(4):
            boxes.append(engines.create(spec))
        assert [b.engine for b in boxes] == ["remote-tls", "here", "here", "here"], seen
        assert engines.placed == {"here": 3, "remote-tls": 1}
        for box in boxes:
            assert box.exec(["true"], user="65534:65534", timeout_s=30).exit_code == 0
    finally:
        for box in boxes:
            box.close()
    for engine in engines.engines:
        _wait_none_left(engine, among={box.id for box in boxes})


def _expert_run(env: object, steps: int) -> list[tuple[str, str, bool]]:
    """The expert's actions, their observations and success, until it submits."""
    from multiturn_envs.envs.terminal.env import TerminalEnv

    assert isinstance(env, TerminalEnv)
    trajectory = []
    for _ in range(steps):
        action = env.expert_action()
        obs, _, terminated, _, info = env.step(action)
        trajectory.append((action, obs, bool(info["success"])))
        if terminated:
            break
    return trajectory


def test_a_terminal_snapshot_taken_here_continues_identically_on_the_remote_engine(
    second: SecondEngine, ca_variables: None
) -> None:
    from multiturn_envs.envs.terminal.env import TerminalEnv

    here = TerminalEnv(max_turns=None, end_on_success=False, warm=1, engines="local")
    there = TerminalEnv(
        max_turns=None, end_on_success=False, warm=1, engines=second.tls_address("remote-tls")
    )
    try:
        here.reset(seed=0, options={"task_id": TASK})
        here.step("cd /app && export MARK=7 && echo hi > note.txt")
        state = here.get_state()
        there.reset(seed=0, options={"task_id": TASK})
        there.set_state(state)
        assert there._episode is not None and there._episode.box.engine == "remote-tls"
        probe = "pwd; echo $MARK; cat note.txt; ls"
        assert there.step(probe)[0] == here.step(probe)[0]
        trajectory = _expert_run(there, 8)
        assert trajectory == _expert_run(here, 8)
        assert trajectory[-1] == ("submit", trajectory[-1][1], True)
    finally:
        here.close()
        there.close()
    _wait_none_left(DockerEngine.shared(second.tls_address("remote-tls")))


def test_steps_stay_correct_and_timeouts_fair_with_50_ms_latency(second: SecondEngine) -> None:
    from multiturn_envs.envs.terminal.env import TerminalEnv

    slow = second.add_latency(50)
    env = TerminalEnv(
        max_turns=None, end_on_success=False, warm=1, command_timeout_s=2.0, engines=slow
    )
    try:
        (engine,) = env.provider().engines  # type: ignore[attr-defined]
        start = time.monotonic()
        engine.client.ping()
        assert time.monotonic() - start >= 0.05  # the latency is there
        env.reset(seed=0, options={"task_id": TASK})
        obs, *_, info = env.step("sleep 1; echo done")
        assert obs.startswith("done\n") and not info["timed_out"]
        start = time.monotonic()
        obs, *_, info = env.step("sleep 30")
        assert info["timed_out"]
        assert time.monotonic() - start < 2.0 + 8.0  # the limit, then the restart's round trips
        obs, *_ = env.step("echo still here")
        assert obs.startswith("still here\n")
    finally:
        second.clear_latency()
        env.close()


def test_an_engine_killed_mid_episode_is_a_clear_error_and_the_episode_moves_on(
    second: SecondEngine,
) -> None:
    """Last in the module: it kills the engine (restarted after, so that stop cleans up)."""
    from multiturn_envs.envs.terminal.env import TerminalEnv

    tls = second.tls_address("remote-tls")
    env = TerminalEnv(max_turns=None, end_on_success=False, warm=1, engines=tls)
    rescue = TerminalEnv(max_turns=None, end_on_success=False, warm=1, engines="local")
    try:
        env.reset(seed=0, options={"task_id": TASK})
        env.step("cd /app && echo kept > kept.txt")
        state = env.get_state()
        second.kill()
        start = time.monotonic()
        with pytest.raises(EngineGone, match="remote-tls"):
            env.step("echo lost")
        assert time.monotonic() - start < 60
        rescue.reset(seed=0, options={"task_id": TASK})
        rescue.set_state(state)
        assert rescue.step("cat kept.txt; pwd")[0].startswith("kept\n/app\n")
    finally:
        env.close()
        rescue.close()
        second.restart()
