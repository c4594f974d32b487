"""A run's folder: its saved config, its per-step log, its checkpoints and what resumes.

``train_config.json`` records the config a run started with, ``train_log.jsonl`` one line per
step, ``checkpoint-N`` TRL's checkpoints and ``final`` the trained model. Resume, the study's
reuse of an arm already trained and the check before a run writes anything ask this module
whether a folder holds a run of a given config (:func:`ran_with`, the one home of that
question) and where to continue from. A run folder may be anyone's: what is read from it goes
through :mod:`multiturn_envs.untrusted` (bounded, never out of the folder).
"""

from __future__ import annotations

import re
from pathlib import Path

from multiturn_envs.rl.config import MAX_CONFIG_BYTES, TrainConfig
from multiturn_envs.untrusted import Folder

__all__ = [
    "CONFIG_FILE",
    "FINAL",
    "LOG_FILE",
    "check_output_dir",
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
    started takes its default, and an old spelling today's), equals it. Resume, the study's
    reuse of a trained arm and the check before a run writes (:func:`check_output_dir`) ask.

    The file is read within its folder (a link out of it is refused) and bounded; a file that
    is no config is a ``ValueError`` naming it."""
    out = Path(config.output_dir)
    if not out.is_dir():
        return False
    folder = Folder(out)
    if not folder.exists(CONFIG_FILE):
        return False
    data = folder.read_json(CONFIG_FILE, max_bytes=MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise ValueError(f"{out / CONFIG_FILE}: a train config is a JSON object")
    try:
        saved = TrainConfig.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{out / CONFIG_FILE}: {exc}") from None
    return saved.to_dict() == config.to_dict()


def check_output_dir(config: TrainConfig) -> None:
    """Refuse, before a run writes a byte, an ``output_dir`` whose files are not a run of
    ``config``: a file the user owns is never changed unless the project wrote it.

    A folder that does not exist or is empty is fine; so is one that holds a run of this
    config (:func:`ran_with`: a resume, or the same run again, rewrites only its own files).
    Anything else (someone's files, a run of another config) is a ``ValueError`` saying what
    is there and what to do (the CLI's exit status 2)."""
    out = Path(config.output_dir)
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise ValueError(f"output_dir {out} is not a folder: name a new or empty folder")
    entries = Folder(out).listdir(max_entries=MAX_RUN_ENTRIES)
    if not entries or ran_with(config):
        return
    shown = ", ".join(sorted(e.path for e in entries)[:5]) + (", ..." if len(entries) > 5 else "")
    if any(e.path == CONFIG_FILE for e in entries):
        raise ValueError(
            f"output_dir {out} holds a run of another config ({CONFIG_FILE} differs): name a "
            "new or empty folder, or run that folder's own config (resume=True continues it)"
        )
    raise ValueError(
        f"output_dir {out} is not empty and holds no run of ours ({shown}): a run writes "
        f"{CONFIG_FILE}, {LOG_FILE}, checkpoints and the model there, so name a new or "
        "empty folder"
    )


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
