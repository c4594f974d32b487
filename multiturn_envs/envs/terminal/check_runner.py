"""The checker that runs a task's checks, INSIDE its own container (standard library only).

It never runs in the agent's container: the host copies the agent's ``/app`` (a tar from the
engine) to this process, which unpacks it into its own container's ``/app``, runs each check
there as a separate ``bash`` process, and answers with one JSON line. The checks (and any test
files) travel on this process's stdin, never through a disk the agent could reach, so the agent
can neither read nor modify them. The process is non-dumpable, so code a check runs (the
agent's scripts, as the same uid) cannot read its memory or file descriptors; after each job
every other process of the uid is killed and ``/app`` and ``/tmp`` are emptied.

Protocol: one JSON line per job on stdin, ``{"checks": [{"name", "script"}], "timeout_s",
"app_tar": base64, "support_tar": base64 | null}``; one JSON line per job on stdout,
``{"results": [{"name", "passed", "exit_code", "output"}]}``.
"""

import base64
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from typing import Any

APP = "/app"
SUPPORT = "/tmp/checks"
OUTPUT_CHARS = 2000
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": APP,
    "LANG": "C.UTF-8",
    "TEST_DIR": SUPPORT,
    "PYTHONDONTWRITEBYTECODE": "1",
}


def _wipe() -> None:
    script = (
        f"chmod -R u+rwX {APP} /tmp 2>/dev/null; "
        f"find {APP} /tmp -mindepth 1 -delete 2>/dev/null; true"
    )
    subprocess.run(["sh", "-c", script], stdin=subprocess.DEVNULL, timeout=60, check=False)


def _untar(data: bytes, dest: str, strip: int) -> str:
    os.makedirs(dest, exist_ok=True)
    done = subprocess.run(
        ["tar", "-x", "-p", f"--strip-components={strip}", "-C", dest, "-f", "-"],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.stderr.decode("utf-8", "replace")[-500:] if done.returncode else ""


def _run_check(script: str, timeout_s: float) -> dict[str, Any]:
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=APP,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    text = out.decode("utf-8", "replace")
    if len(text) > OUTPUT_CHARS:
        text = text[: OUTPUT_CHARS // 2] + "\n[...]\n" + text[-OUTPUT_CHARS // 2 :]
    return {"passed": code == 0, "exit_code": code, "output": text}


def _job(job: dict[str, Any]) -> dict[str, Any]:
    _wipe()
    problem = _untar(base64.b64decode(job["app_tar"]), APP, 1)
    if job.get("support_tar"):
        problem += _untar(base64.b64decode(job["support_tar"]), SUPPORT, 0)
    results = []
    for check in job["checks"]:
        result = _run_check(check["script"], float(job.get("timeout_s", 30)))
        result["name"] = check["name"]
        results.append(result)
    return {"results": results, "unpack_error": problem}


def main() -> None:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return
        try:
            answer = _job(json.loads(line))
        except Exception as exc:  # a bad job: say so and keep serving
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)  # every other process of this uid (not this one)
            _wipe()
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
