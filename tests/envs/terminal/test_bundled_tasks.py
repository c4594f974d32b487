"""Every bundled task: its reference solution passes its checks, an empty submission fails."""

from __future__ import annotations

import pytest

from multiturn_envs.envs.terminal.bundled import bundled_tasks
from multiturn_envs.envs.terminal.env import TerminalEnv

pytestmark = pytest.mark.docker
TASKS = bundled_tasks()


def test_there_are_at_least_30_tasks_with_unique_ids_across_categories() -> None:
    ids = [t.task_id for t in TASKS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)
    assert {t.category for t in TASKS} >= {
        "text",
        "files",
        "data",
        "scripting",
        "archives",
        "permissions",
        "git",
        "debugging",
    }
    assert all(t.solution and t.checks for t in TASKS)


def test_an_empty_submission_is_graded_as_a_failure(terminal_env: TerminalEnv) -> None:
    terminal_env.reset(seed=0, options={"task_id": TASKS[0].task_id})
    _, reward, terminated, _, info = terminal_env.step("submit")
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    assert "do not pass" in terminal_env.current_observation()


def test_every_reference_solution_passes_and_an_empty_submission_fails(
    terminal_env: TerminalEnv,
) -> None:
    failures = []
    for task in TASKS:
        terminal_env.reset(seed=0, options={"task_id": task.task_id})
        empty = terminal_env.check_report()  # what `submit` right away would be graded on
        if empty.all_passed or empty.error is not None:
            failures.append(f"{task.task_id}: an empty submission passes ({empty})")
        info = {"success": False}
        for command in task.solution:
            if info["success"]:  # solved before the last command (a final `cd /app`)
                break
            assert terminal_env.expert_action() == command  # on the reference path
            _, _, terminated, _, info = terminal_env.step(command)
            assert not terminated
        if not info["success"]:
            failures.append(f"{task.task_id}: the reference solution fails: {info}")
            continue
        assert terminal_env.expert_action() == "submit"
        _, reward, terminated, _, info = terminal_env.step("submit")
        assert (reward, terminated, info["success"], info["step_score"]) == (1.0, True, True, 1.0)
    assert not failures, "\n".join(failures)
