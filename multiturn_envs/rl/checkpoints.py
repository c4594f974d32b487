"""A run's folder: its saved config, its per-step log, its checkpoints and what resumes.

``train_config.json`` records the config a run started with, ``train_log.jsonl`` one line per
step, ``checkpoint-N`` TRL's checkpoints and ``final`` the trained model. Resume, and the
study's reuse of an arm already trained, ask this module whether a folder holds a run of a
given config and where to continue from.
"""

from __future__ import annotations

import re
from pathlib import Path

from multiturn_envs.rl.config import TrainConfig
from multiturn_envs.untrusted import Folder

__all__ = [
    "CONFIG_FILE",
    "FINAL",
    "LOG_FILE",
    "latest_checkpoint",
    "ran_with",
    "resume_checkpoint",
]

CONFIG_FILE = "train_config.json"
LOG_FILE = "train_log.jsonl"
FINAL = "final"
MAX_RUN_ENTRIES = 100_000
"""The entries a run's folder may hold (checkpoints, logs) when it is listed."""


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest ``checkpoint-N`` folder of a run, if any."""
    if not Path(output_dir).is_dir():
        return None
    entries = Folder(output_dir).listdir(max_entries=MAX_RUN_ENTRIES)  # anyone's folder
    steps = [
        int(e.path.removeprefix("checkpoint-"))
        for e in entries
        if e.kind == "dir" and re.fullmatch(r"checkpoint-\d{1,18}", e.path)
    ]
    return Path(output_dir) / f"checkpoint-{max(steps)}" if steps else None


def ran_with(config: TrainConfig) -> bool:
    """Whether ``config.output_dir`` holds a run started with ``config``: its
    ``train_config.json``, read through :class:`TrainConfig` (so a field added since the run
    started takes its default), equals it. Resume and the study's reuse of a trained arm ask."""
    saved = Path(config.output_dir) / CONFIG_FILE
    if not saved.exists():
        return False
    return TrainConfig.from_file(saved).to_dict() == config.to_dict()  # bounded, checked


def resume_checkpoint(config: TrainConfig, resume: bool | str) -> str | None:
    """The checkpoint to resume from (``None`` for a fresh run), or a clear error.

    ``resume=True`` takes the latest ``checkpoint-N`` of ``config.output_dir``; a run resumes
    only with the config it started with (``train_config.json`` there).
    """
    if not resume:
        return None
    out = Path(config.output_dir)
    saved = out / CONFIG_FILE
    if not saved.exists():
        raise ValueError(f"{out}: no {CONFIG_FILE}, nothing to resume")
    if not ran_with(config):
        raise ValueError(f"{saved} differs from this config: resume with the same config")
    found = latest_checkpoint(out) if resume is True else Path(str(resume))
    if found is None or not found.is_dir():
        raise ValueError(f"{out}: no checkpoint to resume from")
    return str(found)
