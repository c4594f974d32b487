"""Code in the docs runs as written (a doc example that drifted from the API fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _python_blocks(markdown: str, after: str) -> list[str]:
    section = markdown[markdown.index(after) :]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_write_your_own_env_example_passes_the_contract() -> None:
    text = (DOCS / "env-contract.md").read_text(encoding="utf-8")
    code = _python_blocks(text, "## Writing your own env")[0]  # the env; later blocks test it
    namespace: dict[str, object] = {"__name__": "docs_example"}
    try:
        exec(compile(code, "docs/env-contract.md", "exec"), namespace)  # runs check_text_env
        env = namespace["env"]
        assert isinstance(env, gym.Env)
        env.reset(seed=3, options={"task_id": "secret-9"})
        _, reward, terminated, _, info = env.step("guess 9")
        assert (reward, terminated, info["success"], info["step_score"]) == (1.0, True, True, 1.0)
        env.close()
    finally:
        gym.registry.pop("Mine/Guess-v0", None)


def test_the_async_vector_env_example_runs() -> None:
    text = (DOCS / "env-contract.md").read_text(encoding="utf-8")
    code = _python_blocks(text, "## Checks, copies and vector envs")[0]
    namespace: dict[str, object] = {"__name__": "docs_example"}
    exec(compile(code, "docs/env-contract.md", "exec"), namespace)
    rewards = namespace["rewards"]
    assert len(rewards) == 2  # type: ignore[arg-type]


def test_the_plain_function_policy_example_runs() -> None:
    text = (DOCS / "harness.md").read_text(encoding="utf-8")
    code = _python_blocks(text, "A plain function is a policy")[0]
    namespace: dict[str, object] = {"__name__": "docs_example"}
    exec(compile(code, "docs/harness.md", "exec"), namespace)
    records = namespace["records"]
    assert len(records) == 2  # type: ignore[arg-type]
    assert all(r["actions"][0] == "<answer>Down</answer>" for r in records)  # type: ignore[attr-defined]
