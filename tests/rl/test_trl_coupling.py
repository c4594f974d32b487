"""The TRL coupling, stated and checked: the [trl] extra pins the supported range, the installed
TRL has every internal the trainer reads, and a TRL that moved one is named clearly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from multiturn_envs.testing import require_packages

ROOT = Path(__file__).resolve().parents[2]


def _trl() -> Any:
    require_packages("trl")
    import trl

    return trl


def test_the_extra_pins_the_supported_range() -> None:
    from multiturn_envs.rl.trl_coupling import SUPPORTED_TRL

    pyproject = (ROOT / "pyproject.toml").read_text()
    pins = re.findall(r'"trl([<>=!~][^"]*)"', pyproject)
    assert pins and all(pin == SUPPORTED_TRL for pin in pins), pins
    assert SUPPORTED_TRL in (ROOT / "docs" / "training.md").read_text()


def test_installed_trl_has_every_internal_the_trainer_reads() -> None:
    trl = _trl()
    from multiturn_envs.rl.trl_coupling import (
        TESTED_TRL,
        check_trl,
        trl_coupling_problem,
        trl_version_supported,
    )

    assert trl_coupling_problem() is None
    assert trl_version_supported(trl.__version__) and trl.__version__ in TESTED_TRL
    check_trl()


def test_a_moved_internal_is_named() -> None:
    trl = _trl()
    from multiturn_envs.rl.trl_coupling import trl_coupling_problem

    class Renamed(trl.GRPOTrainer):  # type: ignore[misc]
        _generate_and_score_completions = None  # type: ignore[assignment]

    class Resigned(trl.GRPOTrainer):  # type: ignore[misc]
        def _generate_and_score_completions(self, inputs: Any, extra: Any) -> Any:  # type: ignore[override]
            return {"completion_ids": 0, "completion_mask": 0, "tool_mask": 0, "advantages": 0}

    class NoToolMask(trl.GRPOTrainer):  # type: ignore[misc]
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            return {"completion_ids": 0, "completion_mask": 0, "advantages": 0}

    assert "is gone" in str(trl_coupling_problem(Renamed))
    assert "not (self, inputs)" in str(trl_coupling_problem(Resigned))
    assert "['tool_mask']" in str(trl_coupling_problem(NoToolMask))


def test_the_trainer_refuses_a_moved_trl_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    _trl()
    import multiturn_envs.rl.trl_coupling as coupling

    monkeypatch.setattr(coupling, "trl_coupling_problem", lambda cls=None: "X is gone")
    with pytest.raises(RuntimeError, match=r"X is gone.*works with TRL >=1\.16"):
        coupling.check_trl()
