"""On the real converted Spider dev databases: golds score 1 in both modes, errors below 1."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv
from multiturn_envs.testing import require

HAVE_INTERCODE = importlib.util.find_spec("intercode") is not None


@pytest.mark.parametrize("scoring", ["exact", "intercode"])
@pytest.mark.parametrize("tasks", ["intercode", "bundled"])
def test_golds_score_one_and_injected_errors_below(scoring: str, tasks: str) -> None:
    if tasks == "intercode":
        require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks=tasks, scoring=scoring, max_turns=10)
    rng = np.random.default_rng(7)
    try:
        for task_id in env.task_ids():
            env.reset(seed=0, options={"task_id": task_id})
            assert env.score_action(env.expert_action()) == 1.0, task_id
            for _ in range(3):
                wrong = env.error_action(rng)
                assert env.score_action(wrong) < 1.0, (task_id, wrong)
            _, _, terminated, _, info = env.step(env.error_action(rng))
            assert not terminated and not info["query_error"], task_id
    finally:
        env.close()


def test_error_actions_are_edits_of_the_gold_on_spider() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks="intercode")
    rng = np.random.default_rng(0)
    edited = 0
    for task_id in env.task_ids():
        env.reset(options={"task_id": task_id})
        wrong = env.error_action(rng)
        # a one-edit variant of the gold, not a stand-in (unless no edit can differ from an
        # empty gold result)
        edited += wrong not in env._fallbacks[task_id] or not env.gold_result().rows
    env.close()
    assert edited == len(env.task_ids())


def test_all_1034_spider_dev_golds_run_on_the_converted_databases(intercode_data: Path) -> None:
    from multiturn_envs.envs.intercode_sql.mysql_rejects import mysql_rejects

    env = InterCodeSQLEnv(tasks="spider-dev", spider_dev_file=intercode_data)
    try:
        ids = env.task_ids()
        assert len(ids) == 1034
        empty = rejected = 0
        for task_id in ids:
            gold = env.gold_result(task_id)  # raises if a gold fails
            assert gold.ok and gold.rows is not None
            empty += not gold.rows
            task = env.task(task_id)
            rejected += mysql_rejects(task.gold, env.mysql_tables(task.db), task.db) is not None
    finally:
        env.close()
    assert empty == 80  # 88 with NOCASE alone (field notes); PAD SPACE finds 8 more
    assert rejected == 17  # golds MySQL 8 refuses; listed in the env card


def test_spider_dev_is_found_from_argument_env_var_and_cache(
    intercode_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multiturn_envs.envs.intercode_sql.tasks import find_spider_dev_file

    source = intercode_data / "ic_spider_dev.json"
    assert find_spider_dev_file(source) == source
    assert find_spider_dev_file(intercode_data) == source  # a directory holding the file
    monkeypatch.setenv("MULTITURN_ENVS_SPIDER_DEV", str(source))
    assert find_spider_dev_file() == source
    monkeypatch.delenv("MULTITURN_ENVS_SPIDER_DEV")
    monkeypatch.setenv("MULTITURN_ENVS_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="princeton-nlp/intercode") as missing:
        InterCodeSQLEnv(tasks="spider-dev")
    assert str(tmp_path / "intercode_sql" / "ic_spider_dev.json") in str(missing.value)
    (tmp_path / "intercode_sql").mkdir()
    (tmp_path / "intercode_sql" / "ic_spider_dev.json").write_bytes(source.read_bytes())
    env = InterCodeSQLEnv(tasks="spider-dev")
    assert env.task_ids()[0] == "spider-dev/poker_player/001"
    env.close()
