"""Every missing optional extra is one line naming it and exit status 2, never a traceback
(the modules are really absent in the child process: ``None`` in ``sys.modules`` makes their
import fail as an uninstalled package's does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from multiturn_envs.extras import ENV_EXTRAS, MODULE_EXTRAS, MissingExtra, missing_extra, require
from multiturn_envs.harness import EvalConfig, run_eval
from multiturn_envs.policies.baselines import RandomPolicy

ROOT = Path(__file__).resolve().parents[1]


def _cli(blocked: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from multiturn_envs.cli import main\n"
        f"sys.exit(main({args!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def record_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "r.jsonl"
    config = EvalConfig("MT/FrozenLake-v0", "random", ["4x4"], 2, 3)
    run_eval(config, RandomPolicy(), str(out), progress=False)
    return out


CASES = [
    ("trl", ["trl"], ["train", "--model", "tiny", "--warm-start", "format", "--steps", "1"]),
    ("sql", ["sqlglot"], ["eval", "MT/InterCode-SQL-v0", "--tasks", "1", "--samples", "1"]),
    ("terminal", ["docker"], ["eval", "MT/Terminal-v0", "--tasks", "1", "--samples", "1"]),
    ("plot", ["matplotlib"], ["report", "{run}", "--bootstrap", "0", "--out-dir", "plots"]),
    ("plot", ["matplotlib"], ["dynamics", "{run}", "--bootstrap", "0", "--plot", "d.png"]),
    ("inspect", ["inspect_ai"], ["export", "{run}", "--log", "out.eval"]),
    ("ray", ["ray"], ["eval", "MT/FrozenLake-v0", "--executor", "ray", "--tasks", "1"]),
    ("llm", ["torch", "transformers"], ["eval", "MT/FrozenLake-v0", "--policy", "hf:smollm2"]),
    ("server", ["starlette", "uvicorn", "websockets"], ["serve", "MT/FrozenLake-v0"]),
]


@pytest.mark.parametrize(
    ("extra", "blocked", "args"), CASES, ids=[" ".join(c[2][:2]) for c in CASES]
)
def test_a_missing_extra_is_one_line_naming_it(
    extra: str, blocked: list[str], args: list[str], record_file: Path, tmp_path: Path
) -> None:
    args = [a.replace("{run}", str(record_file)) for a in args]
    if args[0] == "eval":
        args += ["--out", str(tmp_path / "e.jsonl"), "-q"]
    if args[0] == "train":
        args += ["--output-dir", str(tmp_path / "train")]
    done = _cli(blocked, args, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("multiturn-envs: error:"), done.stderr[-2000:]
    assert f"multiturn-envs[{extra}]" in lines[0] and "Traceback" not in done.stderr


def test_list_says_which_env_needs_which_extra(tmp_path: Path) -> None:
    done = _cli(["sqlglot"], ["list"], tmp_path)
    assert done.returncode == 0
    line = next(x for x in done.stdout.splitlines() if x.startswith("MT/InterCode-SQL-v0"))
    assert "unavailable here" in line and "multiturn-envs[sql]" in line


def test_the_table_names_real_extras() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert set(MODULE_EXTRAS.values()) <= set(extras)
    assert {extra for extra, _ in ENV_EXTRAS.values()} <= set(extras)


def test_missing_extra_answers_only_for_known_modules() -> None:
    assert missing_extra(ModuleNotFoundError("x", name="sqlglot.expressions")) is not None
    assert missing_extra(ModuleNotFoundError("x", name="no_such_thing")) is None
    assert missing_extra(ValueError("x")) is None
    with pytest.raises(MissingExtra, match=r"\[sql\]"):
        require("it", "sql", ("no_such_module_xyz",))
    require("it", "sql", ("json",))
    assert json  # the stdlib is always there
