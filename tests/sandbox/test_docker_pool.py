"""Docker-pool specifics: hardening as seen from inside, reuse, recycling, orphan reaping."""

from __future__ import annotations

import contextlib
import json
import re
import time
from typing import Any

import pytest

from multiturn_envs.sandbox.base import RunLimits, TestCase
from multiturn_envs.sandbox.docker_pool import DockerSandbox
from multiturn_envs.sandbox.engine import IMAGE
from multiturn_envs.sandbox.image import default_sandbox
from multiturn_envs.sandbox.orphans import LABEL, OWNER_LABEL, owner_tag, reap_orphans

pytestmark = pytest.mark.docker

PROBE = (
    "import json, os\n"
    "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines()"
    " if ':\\t' in l)\n"
    "print(json.dumps({'uid': os.getuid(), 'cap': status['CapEff'].strip(),"
    " 'nnp': status['NoNewPrivs'].strip(), 'cwd': os.getcwd()}))\n"
)


def test_hardening_seen_from_inside(docker_sandbox: DockerSandbox) -> None:
    result = docker_sandbox.run(PROBE, [TestCase("stdio", "", "")])
    seen = json.loads(result.results[0].actual)
    assert seen == {"uid": 65534, "cap": "0000000000000000", "nnp": "1", "cwd": "/tmp/scratch"}
    box = docker_sandbox._all[docker_sandbox.container_ids()[0]].box
    container = box.owner.client.containers.get(box.id)  # type: ignore[attr-defined]
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and host["Init"]
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"][0]
    assert host["PidsLimit"] == 64 and host["Memory"] == host["MemorySwap"] > 0
    assert container.attrs["Config"]["User"] == "65533:65533"


def test_a_missing_image_is_named_with_the_command_that_builds_it(docker_ready: None) -> None:
    """Before any container: the engine answers, the image is not there. Starting the pool
    raises the typed error; a run reports it as its error (no container was made)."""
    from multiturn_envs.sandbox.image_transfer import ImageMissing

    why = r"no-such-recipe is missing; build it: multiturn-envs sandbox build"
    sandbox = DockerSandbox(image="multiturn-envs-sandbox:no-such-recipe", size=1)
    try:
        result = sandbox.run("print(1)", [TestCase("stdio", "", "1")])
        assert result.results == () and re.search(why, result.error or ""), result
        with pytest.raises(ImageMissing, match=why):
            sandbox.provider  # noqa: B018 (the property starts the pool)
        assert sandbox.container_ids() == []
    finally:
        sandbox.close()


def test_containers_are_reused_and_recycled(docker_ready: None) -> None:
    with DockerSandbox(size=1, max_uses=3) as sandbox:
        ids = []
        for _ in range(4):
            assert sandbox.run("print(1)", [TestCase("stdio", "", "1")]).all_passed
            ids.append(sandbox.container_ids()[0] if sandbox.container_ids() else None)
        assert ids[0] == ids[1]  # warm reuse
        first = sandbox.container_ids()
        # killing everything of the code's uid kills the runner: the container is replaced
        sandbox.run(
            "import os\nos.kill(-1, 9)", [TestCase("stdio", "", "")], RunLimits(timeout_s=1)
        )
        assert sandbox.run("print(1)", [TestCase("stdio", "", "1")]).all_passed
        assert sandbox.container_ids() != first


def test_archive_transport(docker_ready: None) -> None:
    with DockerSandbox(size=1, transport="archive") as sandbox:
        tests = [TestCase("stdio", f"{i}", f"{i}") for i in range(5)]
        assert sandbox.run("print(input())", tests).all_passed
        # the tests file landed in /job/work by put_archive, and is gone before the code runs
        snoop = "import glob\nprint(sorted(glob.glob('/job/work/*')))\n"
        result = sandbox.run(snoop, [TestCase("stdio", "", "SECRET-EXPECTED")])
        assert result.results[0].actual.strip() == "['/job/work/program.py']"


def test_orphans_are_reaped_by_label(docker_ready: None) -> None:
    import docker

    client = docker.from_env()
    dead = owner_tag().rsplit(":", 1)[0] + ":not-a-start-time"
    orphan = client.containers.create(
        IMAGE, ["sleep", "infinity"], labels={LABEL: "1", OWNER_LABEL: dead}
    )
    mine = client.containers.create(
        IMAGE, ["sleep", "infinity"], labels={LABEL: "1", OWNER_LABEL: owner_tag()}
    )
    try:
        removed = reap_orphans(client)
        assert orphan.id in removed and mine.id not in removed
        assert mine.id in {c.id for c in client.containers.list(all=True)}
    finally:
        for c in (orphan, mine):
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)


def test_reaping_survives_a_container_removed_while_it_lists(docker_ready: None) -> None:
    """docker-py inspects each listed container; one removed between the list and its inspect
    (by a pool's background removal or another process's reaper) must not fail the reaper,
    nor the reset that started a sandbox (a Terminal session failed on this in CI)."""
    import docker

    client = docker.from_env()
    dead = owner_tag().rsplit(":", 1)[0] + ":not-a-start-time"
    made = [
        client.containers.create(
            IMAGE, ["sleep", "infinity"], labels={LABEL: "1", OWNER_LABEL: dead}
        )
        for _ in range(2)
    ]
    listing = client.api.containers

    def list_then_remove_one(*args: Any, **kwargs: Any) -> Any:
        found = listing(*args, **kwargs)
        made[0].remove(force=True)  # gone before the reaper inspects it
        return found

    client.api.containers = list_then_remove_one  # the real engine, this interleaving forced
    try:
        removed = reap_orphans(client)
        assert made[1].id in removed and made[0].id not in removed
    finally:
        client.api.containers = listing
        for c in made:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)


def test_default_sandbox_is_docker(docker_ready: None) -> None:
    sandbox = default_sandbox(size=1)
    try:
        assert sandbox.name == "docker"
    finally:
        sandbox.close()
    with pytest.raises(RuntimeError, match="sandbox build"):
        default_sandbox(image="multiturn-envs-sandbox:does-not-exist")


# A program that looks for a secret in its own memory: every readable mapping, searched for
# 32-hex-digit words whose sha256 is the input. The secret itself never appears in the source.
MEMORY_SCAN = (
    "import hashlib, re, sys\n"
    "want = sys.stdin.read().strip()\n"
    "found = 0\n"
    "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
    "    for line in maps:\n"
    "        span, perms = line.split()[:2]\n"
    "        if 'r' not in perms or '[vvar]' in line or '[vsyscall]' in line:\n"
    "            continue\n"
    "        a, b = (int(x, 16) for x in span.split('-'))\n"
    "        try:\n"
    "            mem.seek(a)\n"
    "            data = mem.read(b - a)\n"
    "        except (OSError, ValueError, OverflowError):\n"
    "            continue\n"
    "        for word in set(re.findall(rb'[0-9a-f]{32}', data)):\n"
    "            found += hashlib.sha256(word).hexdigest() == want\n"
    "print('LEAK' if found else 'clean')\n"
)


def test_a_job_leaves_nothing_for_the_next(docker_ready: None) -> None:
    """One container, one runner session, many jobs: nothing of one job reaches the next."""
    import hashlib
    import uuid

    secret = uuid.uuid4().hex  # 32 hex digits: the expected output of the first job
    digest = hashlib.sha256(secret.encode()).hexdigest()
    with DockerSandbox(size=1) as sandbox:
        first = sandbox.run(
            "import os, subprocess\n"
            "open('/tmp/left-behind', 'w').write('x')\n"
            "open('/dev/shm/left-behind', 'w').write('x')\n"
            "os.makedirs('/tmp/nested/dir', exist_ok=True)\n"
            "print(input())\n",
            [TestCase("stdio", secret, secret)],
        )
        assert first.all_passed, first.results[0].error
        session = sandbox._all[sandbox.container_ids()[0]].session
        assert session is not None
        look = "import os\nprint(sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')))\n"
        seen = sandbox.run(look, [TestCase("stdio", "", "")])
        assert seen.results[0].actual.strip() == "['program.py', 'scratch'] []"
        # the same secret-holding session runs the scan: its zygote is a fresh interpreter
        scan = sandbox.run(
            MEMORY_SCAN, [TestCase("stdio", digest, "clean")], RunLimits(timeout_s=10)
        )
        assert scan.all_passed, (scan.results[0].actual, scan.results[0].stderr[-500:])
        assert sandbox._all[sandbox.container_ids()[0]].session is session  # one session
        # the scan does find a secret that is in its own memory (it can fail)
        mine = sandbox.run(
            f"SECRET = {secret!r}\n" + MEMORY_SCAN, [TestCase("stdio", digest, "LEAK")]
        )
        assert mine.all_passed, mine.results[0].actual


def test_a_session_that_died_while_idle_is_replaced_before_the_next_job(
    docker_ready: None,
) -> None:
    import os
    import signal

    with DockerSandbox(size=1) as sandbox:
        assert sandbox.run("print(1)", [TestCase("stdio", "", "1")]).all_passed
        (cid,) = sandbox.container_ids()
        session = sandbox._all[cid].session
        assert session is not None and session.idle_and_alive()
        stream = session.stream
        pid = stream.api.exec_inspect(stream.exec_id)["Pid"]
        os.kill(pid, signal.SIGKILL)  # from the host, between two jobs
        for _ in range(100):
            if not session.idle_and_alive():
                break
            time.sleep(0.02)
        result = sandbox.run("print(2)", [TestCase("stdio", "", "2")])
        assert result.all_passed, (result.error, [r.error for r in result.results])
        assert sandbox.container_ids() != [cid]


@pytest.mark.parametrize("stream", ["", ">&2"])
def test_a_runner_that_floods_its_exec_stream_is_cut_at_its_bound(
    docker_sandbox: DockerSandbox, stream: str
) -> None:
    """Bound: the host reads at most ``max_bytes`` of report and ``RUNNER_STDERR_CAP`` bytes of
    a runner's stderr (``read_report`` says ``"flood"``), whichever stream a broken runner
    floods, instead of draining it until the time guard (20 s here)."""
    from multiturn_envs.sandbox.exec_session import STDERR_CAP, RunnerSession

    box = docker_sandbox.hardened_container()
    try:
        session = RunnerSession(box.process(["sh", "-c", f"yes flood {stream}"], user="0:0"))
        start = time.monotonic()
        out, err, ended = session.read_report(20.0, 100_000)
        assert ended == "flood"
        assert time.monotonic() - start < 10
        assert len(out) <= 100_000 and len(err) <= STDERR_CAP
        session.close()
    finally:
        box.close()
