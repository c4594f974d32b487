"""Output files (``--json-out``, the report's and dynamics' PNGs): a file the project did not
write is never changed; one it wrote is replaced only with ``--overwrite``."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.cli import main
from multiturn_envs.errors import OutputFileError
from multiturn_envs.harness import EvalConfig, run_eval
from multiturn_envs.output_files import (
    JSON_MARKER_KEY,
    check_output,
    json_is_ours,
    png_is_ours,
    write_json_output,
    write_output,
)
from multiturn_envs.policies.baselines import NoisyExpertPolicy


def _foreign(path: Path, kind: str) -> bytes | None:
    """Put a file of the user's at ``path``; its bytes (``None``: not a regular file)."""
    if kind == "text":
        path.write_text("my notes\n", encoding="utf-8")
    elif kind == "json":  # JSON, but without our marker
        path.write_text('{"mine": [1, 2, 3]}\n', encoding="utf-8")
    elif kind == "json-fake-marker":  # the key, a value that is not ours
        path.write_text('{"written_by": "someone else"}\n', encoding="utf-8")
    elif kind == "png":  # a PNG of someone else's (matplotlib's, no keyword of ours)
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        ax.plot([1, 2])
        fig.savefig(path, format="png")
        plt.close(fig)
    elif kind == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("a.txt", "mine")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
        return None
    elif kind == "link":
        target = path.parent / "target.json"
        target.write_text('{"written_by": "multiturn-envs 0"}', encoding="utf-8")
        path.symlink_to(target)
        return None
    elif kind == "fifo":
        os.mkfifo(path)
        return None
    return path.read_bytes()


KINDS = ["text", "json", "json-fake-marker", "png", "zip", "empty", "directory", "link", "fifo"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_file_the_project_did_not_write_is_refused_and_untouched(
    tmp_path: Path, kind: str, overwrite: bool
) -> None:
    path = tmp_path / "out.json"
    before = _foreign(path, kind)
    for is_ours in (json_is_ours, png_is_ours):
        with pytest.raises(OutputFileError, match="left as it is"):
            write_output(path, b"new", overwrite=overwrite, is_ours=is_ours)
    with pytest.raises(OutputFileError):
        write_json_output(path, {"a": 1}, overwrite=overwrite)
    if before is not None:
        assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_json_output_is_marked_and_replaced_only_with_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "numbers.json"
    write_json_output(path, {"value": 1}, overwrite=False)
    first = json.loads(path.read_text(encoding="utf-8"))
    assert first["value"] == 1 and first[JSON_MARKER_KEY].startswith("multiturn-envs")
    assert json_is_ours(path)
    with pytest.raises(OutputFileError, match="overwrite it"):
        write_json_output(path, {"value": 2}, overwrite=False)
    assert json.loads(path.read_text(encoding="utf-8"))["value"] == 1
    write_json_output(path, {"value": 2}, overwrite=True)
    assert json.loads(path.read_text(encoding="utf-8"))["value"] == 2
    assert not check_output(tmp_path / "new.json", overwrite=False, is_ours=json_is_ours)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=300))
def test_no_bytes_but_ours_pass_for_ours(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f"
        path.write_bytes(data)
        assert not png_is_ours(path)
        assert not json_is_ours(path)
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + data)  # a PNG signature, then noise
        assert not png_is_ours(path)


@pytest.fixture(scope="module")
def run_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "noisy.jsonl"
    config = EvalConfig("MT/FrozenLake-v0", "noisy", ["4x4"], 3, 4, seed=1)
    run_eval(config, NoisyExpertPolicy(0.3), str(out), progress=False)
    return out


@pytest.mark.parametrize("kind", ["text", "png", "directory"])
def test_report_never_replaces_a_png_it_did_not_write(
    run_file: Path, tmp_path: Path, kind: str
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    out.mkdir()
    theirs = out / f"{run_file.stem}_k_curves.png"
    before = _foreign(theirs, kind)
    args = ["report", str(run_file), "--out-dir", str(out), "--bootstrap", "0"]
    assert main(args) == 2
    assert main([*args, "--overwrite"]) == 2
    if before is not None:
        assert theirs.read_bytes() == before
    assert not (out / f"{run_file.stem}_heatmap.png").exists()  # checked before writing any


def test_report_replaces_its_own_pngs_only_with_overwrite(run_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    args = ["report", str(run_file), "--out-dir", str(tmp_path), "--bootstrap", "0"]
    assert main(args) == 0
    pngs = sorted(tmp_path.glob("*.png"))
    assert len(pngs) == 3 and all(png_is_ours(p) for p in pngs)
    assert main(args) == 2
    assert main([*args, "--overwrite"]) == 0


def test_json_out_of_a_command_follows_the_rule(run_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "dyn.json"
    base = ["dynamics", str(run_file), "--bootstrap", "0", "--json-out", str(out)]
    assert main(base) == 0
    assert json_is_ours(out)
    assert main(base) == 2
    assert main([*base, "--overwrite"]) == 0
    mine = tmp_path / "mine.json"
    mine.write_text('{"keep": true}\n', encoding="utf-8")
    args = ["dynamics", str(run_file), "--bootstrap", "0", "--json-out", str(mine), "--overwrite"]
    assert main(args) == 2
    assert mine.read_text(encoding="utf-8") == '{"keep": true}\n'
