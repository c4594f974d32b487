"""A record file as an inspect_ai eval log: inspect's own reader gives back every number of
our records and of our report; ``inspect view`` shows a sample's turns with their oracle step
scores in a real headless browser; a file the export did not write is never replaced."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.cli import main
from multiturn_envs.episode import ENDS
from multiturn_envs.errors import OutputFileError
from multiturn_envs.harness import EvalConfig, read_run, run_eval
from multiturn_envs.harness.report import summarise
from multiturn_envs.policies import CallablePolicy, Reply, TokenUsage, TurnRequest
from multiturn_envs.policies.baselines import NoisyExpertPolicy
from multiturn_envs.testing import require

inspect_log = pytest.importorskip("multiturn_envs.harness.inspect_log")
DATA = Path(__file__).parent / "data"
SCREENSHOTS = Path(os.environ.get("MTE_SCREENSHOT_DIR", tempfile.gettempdir()))


def _inspect() -> Any:
    import importlib.util

    require(importlib.util.find_spec("inspect_ai") is not None, "the Python package 'inspect_ai'")
    import inspect_ai.log

    return inspect_ai.log


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "noisy.jsonl"
    config = EvalConfig(
        "MT/FrozenLake-v0", "noisy-expert:0.3", ["4x4", "random-s4-p0.8-n2"], 4, 8, seed=3
    )
    run_eval(config, NoisyExpertPolicy(0.3), str(out), progress=False)
    return out


def test_every_number_reads_back_equal_to_the_records_and_the_report(
    noisy_run: Path, tmp_path: Path
) -> None:
    log_module = _inspect()
    path = inspect_log.export_inspect(noisy_run, tmp_path / "noisy.eval", n_boot=300, seed=4)
    log = log_module.read_eval_log(str(path))
    run = read_run(noisy_run)
    assert log.status == "success"
    assert log.eval.metadata["multiturn_envs"]["header"] == run.header
    assert log.eval.model == "noisy-expert:0.3" and log.eval.task == "MT/FrozenLake-v0"
    assert log.eval.config.epochs == 4 and log.eval.config.turn_limit == 8
    assert log.samples is not None and len(log.samples) == len(run.records)
    by_key = {(r["task_id"], r["sample"] + 1): r for r in run.records}
    for sample in log.samples:
        record = by_key[(sample.id, sample.epoch)]
        assert sample.scores["success"].value == (1.0 if record["success"] else 0.0)
        meta = sample.metadata
        for key in ("first_success_turn", "max_turns", "budget_mode", "turns", "seed"):
            assert meta[key] == record[key]
        assert meta["step_scores"] == record["step_scores"]
        assert meta["rewards"] == record["rewards"]
        assert meta["prompt_tokens"] == record["prompt_tokens"] == [0] * record["turns"]
        ended = "success" if record["success"] else None
        ended = ended or ("terminal" if record["terminated"] else record["truncation_reason"])
        assert meta["end"] == sample.scores["success"].metadata["end"] == ended
        turns = [e for e in sample.events if e.event == "score" and e.intermediate]
        assert [e.score.value for e in turns] == record["step_scores"]
        assert [e.score.metadata["turn"] for e in turns] == list(range(1, record["turns"] + 1))
        actions = [m.text for m in sample.messages if m.role == "assistant"]
        assert actions == record["actions"]
        assert sample.messages[0].role == "system" and sample.messages[1].role == "user"
        mean = sum(record["step_scores"]) / len(record["step_scores"])
        assert math.isclose(sample.scores["step_score"].value, mean)
        assert sample.model_usage["noisy-expert:0.3"].total_tokens == 0
    table = summarise(run, None, None, 300, 0.05, 4)
    assert log.results is not None
    metrics = log.results.scores[1].metrics
    s, ci = table.surface, table.ci
    assert ci is not None
    for i, k in enumerate(s.ks.tolist()):
        for j, t in enumerate(s.ts.tolist()):
            metric = metrics[f"pass@({k},{t})"]
            assert metric.value == float(s.values[i, j])
            assert metric.metadata == {"low": float(ci.low[i, j]), "high": float(ci.high[i, j])}
    surface = log.results.metadata["pass_surface"]
    assert surface["values"] == s.values.tolist() and surface["low"] == ci.low.tolist()
    success = sum(r["success"] for r in run.records) / len(run.records)
    assert log.results.scores[0].metrics["mean"].value == success


def test_announced_budgets_tool_calls_tokens_and_json(tmp_path: Path) -> None:
    log_module = _inspect()
    call = '<tool_call>\n{"name": "move", "arguments": {"direction": "Right"}}\n</tool_call>'
    config = EvalConfig(
        "MT/FrozenLake-v0", "right", ["4x4"], 2, 3, budget_mode="announced", turn_grid=[1, 3]
    )
    run = tmp_path / "calls.jsonl"
    run_eval(config, CallablePolicy(lambda obs: call, name="right"), str(run), progress=False)
    path = inspect_log.export_inspect(run, tmp_path / "calls.json", n_boot=0)
    log = log_module.read_eval_log(str(path))
    assert json.loads(path.read_text(encoding="utf-8"))["eval"]["task"] == "MT/FrozenLake-v0"
    assert {s.id for s in log.samples} == {"4x4@T=1", "4x4@T=3"}
    sample = next(s for s in log.samples if s.id == "4x4@T=3")
    assistant = [m for m in sample.messages if m.role == "assistant"]
    assert assistant[0].tool_calls and assistant[0].tool_calls[0].function == "move"
    assert assistant[0].tool_calls[0].arguments == {"direction": "Right"}
    after = sample.messages[sample.messages.index(assistant[0]) + 1]
    assert after.role == "tool" and after.tool_call_id == assistant[0].tool_calls[0].id
    assert sample.metadata["prompt_tokens"] is None and sample.model_usage == {}
    assert log.results.metadata["pass_surface"]["ts"] == [1, 3]


class MeteredExpert:
    """The expert, each reply costing 10 prompt and 5 completion tokens."""

    name = "metered"

    def act(self, requests: Sequence[TurnRequest]) -> list[Reply]:
        return [Reply(r.live_env().expert_action(), usage=TokenUsage(10, 5)) for r in requests]


def test_an_episode_ended_by_the_token_limit_says_so(tmp_path: Path) -> None:
    log_module = _inspect()
    config = EvalConfig(
        "MT/FrozenLake-v0",
        "metered",
        ["4x4"],
        1,
        8,
        token_limit=40,
        env_kwargs={"is_slippery": False},
    )
    run = tmp_path / "limited.jsonl"
    run_eval(config, MeteredExpert(), str(run), progress=False)
    log = log_module.read_eval_log(str(inspect_log.export_inspect(run, n_boot=0)))
    (sample,) = log.samples
    assert sample.metadata["end"] == ENDS["token_limit"].name and sample.metadata["turns"] == 3
    assert "ended by token_limit" in sample.scores["success"].explanation
    assert log.eval.config.token_limit == 40
    assert sample.model_usage["metered"].total_tokens == 45


def test_an_old_file_and_an_unreplayable_one_export(tmp_path: Path) -> None:
    log_module = _inspect()
    old = tmp_path / "old.jsonl"
    shutil.copy(DATA / "v1_random_error_after.jsonl", old)
    log = log_module.read_eval_log(str(inspect_log.export_inspect(old, n_boot=0)))
    assert log.eval.task_version == 1 and log.samples
    assert (tmp_path / "old.eval").exists()
    # an env that cannot be made here: refused with a hint, or exported without replay
    lines = old.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["config"]["env_id"] = "MT/NoSuchEnv-v0"
    gone = tmp_path / "gone.jsonl"
    gone.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    assert main(["export", str(gone), "--bootstrap", "0"]) == 2
    assert not (tmp_path / "gone.eval").exists()
    assert main(["export", str(gone), "--bootstrap", "0", "--no-replay"]) == 0
    log = log_module.read_eval_log(str(tmp_path / "gone.eval"))
    assert [m.role for m in log.samples[0].messages][:2] == ["assistant", "user"]


def _foreign(path: Path, kind: str) -> None:
    if kind == "text":
        path.write_text("my notes\n", encoding="utf-8")
    elif kind == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "mine")
    elif kind == "directory":
        path.mkdir()
    elif kind == "link":
        target = path.parent / "target.txt"
        target.write_text("linked\n", encoding="utf-8")
        path.symlink_to(target)


@pytest.mark.parametrize("kind", ["text", "zip", "directory", "link", "inspect-log"])
def test_a_file_the_export_did_not_write_is_never_replaced(
    noisy_run: Path, tmp_path: Path, kind: str
) -> None:
    log_module = _inspect()
    out = tmp_path / "mine.eval"
    if kind == "inspect-log":  # a real inspect log, but someone else's
        ours = inspect_log.export_inspect(noisy_run, tmp_path / "ours.eval", n_boot=0)
        theirs = log_module.read_eval_log(str(ours))
        theirs.eval.metadata = {}
        log_module.write_eval_log(theirs, str(out))
    else:
        _foreign(out, kind)
    before = out.read_bytes() if out.is_file() else None
    for overwrite in (False, True):
        with pytest.raises(OutputFileError, match="exists"):
            inspect_log.export_inspect(noisy_run, out, overwrite=overwrite, n_boot=0)
        args = ["export", str(noisy_run), "--log", str(out), "--bootstrap", "0"]
        assert main([*args, "--overwrite"] if overwrite else args) == 2
    if before is not None:
        assert out.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".mine")]  # no temp left


def test_a_log_the_export_wrote_is_replaced_only_with_overwrite(
    noisy_run: Path, tmp_path: Path
) -> None:
    _inspect()
    out = tmp_path / "noisy.eval"
    inspect_log.export_inspect(noisy_run, out, n_boot=0)
    first = out.read_bytes()
    with pytest.raises(OutputFileError, match="exists"):
        inspect_log.export_inspect(noisy_run, out, n_boot=0)
    assert out.read_bytes() == first
    inspect_log.export_inspect(noisy_run, out, n_boot=10, overwrite=True)
    assert out.read_bytes() != first


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ""])
def test_an_output_that_is_no_log_name_is_refused(
    noisy_run: Path, tmp_path: Path, suffix: str
) -> None:
    _inspect()
    with pytest.raises(ValueError, match=r"\.eval or a \.json"):
        inspect_log.export_inspect(noisy_run, tmp_path / f"out{suffix}", n_boot=0)
    assert main(["export", str(noisy_run), "--log", str(tmp_path / f"o{suffix}")]) == 2


@pytest.mark.parametrize(
    "content", [b"", b"not json\n", b'{"kind": "header"}\n', b"[1, 2]\n", b"\xff\xfe\n"]
)
def test_a_broken_record_file_is_one_line_and_exit_2(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    _inspect()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    assert main(["export", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl" in err
    assert not (tmp_path / "bad.eval").exists()
    assert main(["export", str(tmp_path / "missing.jsonl")]) == 2


# ---------------------------------------------------------------------- inspect view, for real
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def inspect_view(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``inspect view`` serving ``tmp_path/logs`` on 127.0.0.1; stopped at the end."""
    _inspect()
    logs = tmp_path / "logs"
    logs.mkdir()
    port = _free_port()
    inspect = Path(sys.executable).with_name("inspect")
    require(inspect.exists(), "inspect_ai's `inspect` command")
    proc = subprocess.Popen(
        [
            str(inspect),
            "view",
            "start",
            "--log-dir",
            str(logs),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("inspect view did not start")
        yield url, logs
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


class Browser:
    """Debian's chromium, headless, driven over the DevTools protocol (a fresh profile)."""

    def __init__(self, profile: Path) -> None:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        require(chromium is not None, "Debian's chromium (apt-get install chromium)")
        self.proc = subprocess.Popen(
            [
                str(chromium),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--window-size=1400,1000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = profile / "DevToolsActivePort"
        for _ in range(300):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10) as answer:
            targets = json.load(answer)
        page = next(t for t in targets if t["type"] == "page")
        from websockets.sync.client import connect

        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self.n = 0

    def call(self, method: str, **params: Any) -> Any:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self.n:
                return message.get("result", {})

    def text(self) -> str:
        answer = self.call(
            "Runtime.evaluate", expression="document.body ? document.body.innerText : ''"
        )
        return str(answer.get("result", {}).get("value", ""))

    def open(self, url: str, until: str, timeout_s: float = 60.0) -> str:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if until in text:
                return text
            time.sleep(0.3)
        return text

    def screenshot(self, path: Path) -> None:
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        self.stack.close()
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=30)


def test_inspect_view_shows_a_sample_with_its_per_turn_scores(
    noisy_run: Path, inspect_view: tuple[str, Path], tmp_path: Path
) -> None:
    url, logs = inspect_view
    assert main(["export", str(noisy_run), "--log", str(logs / "noisy.eval")]) == 0
    record = read_run(noisy_run).records[0]
    browser = Browser(tmp_path / "profile")
    try:
        page = f"{url}/#/logs/noisy.eval/samples/sample/{record['task_id']}/{record['sample'] + 1}"
        text = browser.open(f"{page}/transcript", until="oracle step score")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "inspect_view_sample_transcript.png"
        browser.screenshot(shot)
    finally:
        browser.close()
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "MT/FrozenLake-v0" in text and "noisy-expert:0.3" in text
    for turn, score in enumerate(record["step_scores"], 1):
        assert f"turn {turn}: oracle step score {score:.4g}" in text
        assert f"turn {turn}/{record['turns']}" in text
    assert all(action in text for action in record["actions"])
