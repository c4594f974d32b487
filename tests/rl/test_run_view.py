"""The training stack asks its env once and closes every env it makes; its folder is its own.

Before issue 33, ``train`` on the example FrozenLake config shrunk to one SFT and one GRPO step
with two rollout slots built 13 envs (one per question: tasks, system prompt, tools, the
tools' callables, ...) and left 4 open (TRL's pooled rollout environments and the two built to
render a tool). Here the envs a ``train`` call makes are counted on the real path, and a run's
output folder must be empty, new, or a run of the same config before a byte is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.cli.app import main
from multiturn_envs.core import TextEnv
from multiturn_envs.rl.checkpoints import CONFIG_FILE, LOG_FILE, check_output_dir
from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.testing import require_packages

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train" / "frozenlake-budgetmix.json"


class EnvCount:
    """Every :class:`TextEnv` made and closed while it is installed."""

    def __init__(self) -> None:
        self.made: list[int] = []
        self.closed: set[int] = set()

    @property
    def open(self) -> int:
        return len(set(self.made) - self.closed)


@pytest.fixture
def env_count(monkeypatch: pytest.MonkeyPatch) -> Iterator[EnvCount]:
    count = EnvCount()
    init, close = TextEnv.__init__, TextEnv.close

    def counted_init(self: TextEnv, *args: Any, **kwargs: Any) -> None:
        count.made.append(id(self))
        init(self, *args, **kwargs)

    def counted_close(self: TextEnv) -> None:
        count.closed.add(id(self))
        close(self)

    monkeypatch.setattr(TextEnv, "__init__", counted_init)
    monkeypatch.setattr(TextEnv, "close", counted_close)
    yield count


def _shrunk(folder: Path) -> TrainConfig:
    data = json.loads(EXAMPLE.read_text())
    data.update(
        steps=1, sft_steps=1, sft_episodes=4, num_generations=2, batch_size=2, save_steps=0,
        max_completion_length=256, output_dir=str(folder),
    )  # fmt: skip
    return TrainConfig.from_dict(data)


def test_the_view_of_a_run_asks_one_env_and_closes_it(env_count: EnvCount) -> None:
    from multiturn_envs.rl.run_view import RunView

    for tools in ("act", "env"):
        config = TrainConfig.from_dict(
            {"warm_start": "format", "tools": tools, "train_tasks": ["4x4", "8x8"]}
        )
        before = len(env_count.made)
        view = RunView.of(config)
        assert len(env_count.made) == before + 1 and env_count.open == 0
        assert view.tasks == ("4x4", "8x8") and view.system_prompt
        assert (tools == "env") == bool(view.tools)
        names = [f.__name__ for f in view.tool_functions()]  # rendered: no env made
        assert names == (["move"] if tools == "env" else ["act"])
        assert len(env_count.made) == before + 1


def test_a_tool_rendered_for_its_schema_is_not_a_rollout() -> None:
    from multiturn_envs.adapters.trl import ENDED, TRLEnvironment, tool_functions

    (act,) = tool_functions(TRLEnvironment)
    assert act("Down") == ENDED  # nothing to step: it says so, never raises


@pytest.mark.timeout(900)
def test_a_train_call_closes_every_env_it_makes(env_count: EnvCount, tmp_path: Path) -> None:
    require_packages("trl", "torch", "transformers", "datasets")
    from multiturn_envs.rl.training import train

    train(_shrunk(tmp_path / "run"), progress=False)
    # the view (1), the tiny tokenizer's chats (1), the SFT episodes and their replays, the
    # two rollout slots TRL pooled: all played, none made to answer a question
    assert env_count.open == 0, f"{env_count.open} of {len(env_count.made)} envs left open"
    assert len(env_count.made) <= 9


@pytest.mark.timeout(900)
def test_a_failed_train_call_closes_its_rollout_envs_too(
    env_count: EnvCount, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_packages("trl", "torch", "transformers", "datasets")
    from multiturn_envs.rl.models import start_model
    from multiturn_envs.rl.trainer import MultiTurnGRPOTrainer
    from multiturn_envs.rl.training import train

    config = _shrunk(tmp_path / "run")
    start = start_model(config, tmp_path / "start")

    def broken(self: Any, inputs: Any) -> Any:
        raise RuntimeError("a rollout failed")

    monkeypatch.setattr(MultiTurnGRPOTrainer, "_generate_and_score_completions", broken)
    made = len(env_count.made)
    with pytest.raises(RuntimeError, match="a rollout failed"):
        train(config, start=start, progress=False)
    assert len(env_count.made) > made and env_count.open == 0


# ------------------------------------------------------------------ the run's folder
def _tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(folder.rglob("*"))
    }


def _config(folder: Path, **kw: Any) -> TrainConfig:
    return TrainConfig.from_dict({"warm_start": "format", "output_dir": str(folder), **kw})


def test_a_new_an_empty_or_an_own_folder_is_fine(tmp_path: Path) -> None:
    check_output_dir(_config(tmp_path / "new" / "deeper"))
    (tmp_path / "empty").mkdir()
    check_output_dir(_config(tmp_path / "empty"))
    own = tmp_path / "own"
    own.mkdir()
    config = _config(own, steps=3)
    (own / CONFIG_FILE).write_text(json.dumps(config.to_dict()))
    (own / LOG_FILE).write_text('{"step": 1}\n')
    check_output_dir(config)


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({"train_log.jsonl": '{"mine": true}\n'}, "holds no run of ours"),
        ({"notes.txt": "my notes"}, r"holds no run of ours \(notes.txt\)"),
        ({CONFIG_FILE: json.dumps({"warm_start": "format", "steps": 99})}, "another config"),
        ({CONFIG_FILE: "[1, 2"}, CONFIG_FILE),
        ({CONFIG_FILE: json.dumps({"stepz": 1})}, "unknown field"),
    ],
)
def test_a_folder_of_someone_elses_files_is_refused_before_a_byte_is_written(
    files: dict[str, str], match: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    before = _tree(folder)
    with pytest.raises(ValueError, match=match):
        check_output_dir(_config(folder))
    args = ["train", "--warm-start", "format", "--output-dir", str(folder), "--steps", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert (len(err.strip().splitlines()) == 1 and "output_dir" in err) or CONFIG_FILE in err, err
    assert _tree(folder) == before


def test_hostile_run_folders_are_refused_within_bounds(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(_config(tmp_path / "linked").to_dict()))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / CONFIG_FILE).symlink_to(outside)  # a config that lives elsewhere: not read
    with pytest.raises(ValueError, match=r"outside|beneath|link"):
        check_output_dir(_config(linked))
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / CONFIG_FILE)  # never blocks
    with pytest.raises(ValueError, match="FIFO"):
        check_output_dir(_config(fifo))
    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / CONFIG_FILE).write_text('{"model": "' + "x" * (2 << 20) + '"}')
    with pytest.raises(ValueError, match="over the limit"):
        check_output_dir(_config(huge))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        check_output_dir(_config(a_file))
