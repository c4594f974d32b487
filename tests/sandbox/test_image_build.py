"""The offline image build (the package's ``sandbox/images/bootstrap.sh``: debootstrap +
``docker import``), run for real to a temporary tag that is removed afterwards. Slow (about one
to four minutes: it downloads and unpacks a minimal Debian), so it is one test; it needs root,
debootstrap and a Debian mirror, and skips without them except under ``CI=true``."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from multiturn_envs.sandbox.base import TestCase
from multiturn_envs.sandbox.docker_pool import DockerSandbox
from multiturn_envs.sandbox.image import build
from multiturn_envs.testing import require

pytestmark = [
    pytest.mark.docker,
    pytest.mark.timeout(1800),
]  # builds images, trains or runs a server: long


def test_offline_build_makes_a_working_sandbox_image(docker_ready: None) -> None:
    require(
        os.geteuid() == 0 and shutil.which("debootstrap") is not None,
        "root and debootstrap (the offline image build)",
    )
    tag = f"multiturn-envs-sandbox:build-test-{uuid.uuid4().hex[:12]}"
    try:
        account = build(tag, offline=True)
        assert "offline" in account and tag in account
        with DockerSandbox(image=tag, size=1) as sandbox:
            probe = "import sys, os\nprint(sys.version_info[0], os.path.isdir('/job'))\n"
            result = sandbox.run(probe, [TestCase("stdio", "", "3 True")])
            assert result.all_passed, (result.error, [r.actual for r in result.results])
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
    listed = subprocess.run(
        ["docker", "images", "-q", tag], capture_output=True, text=True, check=True
    )
    assert listed.stdout.strip() == ""  # the temporary tag is gone
