"""InterCode's five published runs replayed through the env: agreement with InterCode on MySQL.

The whole replay (about 42,000 actions that reached MySQL, 5 models) runs once per module, one
process per model up to the CPUs available: about 60 s on an idle 2-core machine, 120 s on a
busy one (``benchmarks/bench_intercode_agreement.py`` prints the per-model time).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv
from multiturn_envs.envs.intercode_sql.published_runs import (
    PUBLISHED_MODELS,
    ModelAgreement,
    parse_mysql_rows,
    replay_published_runs,
    run_file,
)

# Causes a difference may have besides "unexplained"; each is explained in the env card.
DELIBERATE = {"gold rejected by MySQL 8", "table only on InterCode's server"}


@pytest.fixture(scope="module")
def agreements(intercode_data: Path) -> dict[str, ModelAgreement]:
    return {a.model: a for a in replay_published_runs(intercode_data)}


@pytest.mark.parametrize("model", PUBLISHED_MODELS)
def test_rewards_and_successes_agree_with_intercode(
    agreements: dict[str, ModelAgreement], model: str
) -> None:
    a = agreements[model]
    assert a.episodes >= 1033 and a.executed > 7000
    unexplained = a.causes.get("unexplained", 0)
    assert set(a.causes) <= DELIBERATE | {"unexplained"}
    # the goal: >= 99.5% of actions get InterCode's reward (deliberate differences are counted
    # in causes, listed in the card, and bounded here), >= 99% of trajectories agree on success
    assert (a.executed - unexplained) / a.executed >= 0.995, a.causes
    assert a.reward_agreement >= 0.99, a.causes
    assert a.success_agreement >= 0.99
    assert a.explained <= 0.006 * a.executed


@pytest.mark.parametrize("model", PUBLISHED_MODELS)
def test_exact_mode_agrees_with_mysqls_rows(
    agreements: dict[str, ModelAgreement], model: str
) -> None:
    a = agreements[model]
    assert a.exact_checked > 250
    assert a.exact_agreement >= 0.99


def test_every_recorded_desc_of_a_spider_table_reads_as_ours(intercode_data: Path) -> None:
    """DESC rows as MySQL printed them to the agents, in both connector styles."""
    tasks = json.loads((intercode_data / "ic_spider_dev.json").read_text())
    envs = {kind: InterCodeSQLEnv(tasks="spider-dev", spider_dev_file=intercode_data,
                                  max_turns=None, describe_types=kind, max_rows_shown=1000)
            for kind in ("bytes", "str")}  # fmt: skip
    checked = 0
    try:
        for model in ("gpt-3.5", "vicuna"):
            runs = json.loads(run_file(intercode_data, model).read_text())
            for record in runs.values():
                history = record["turn_history"]
                for action, obs in zip(history["actions"], history["observations"], strict=False):
                    words = action.split()
                    if len(words) != 2 or words[0].upper() not in ("DESC", "DESCRIBE"):
                        continue
                    if not obs.startswith("[("):
                        continue
                    env = envs["bytes" if ", b'" in obs else "str"]
                    env.reset(options={"task_id": env.task_ids()[record["task_id"]]})
                    ours = env.step(action)[0]
                    if ours.startswith("Error"):
                        continue  # a table that existed only on InterCode's server
                    assert ours == obs, (tasks[record["task_id"]]["db"], action)
                    checked += 1
    finally:
        for env in envs.values():
            env.close()
    assert checked > 800


def test_recorded_rows_parse_without_eval() -> None:
    rows = parse_mysql_rows(
        "[(Decimal('3.50'), datetime.datetime(2023, 5, 15, 5, 53, 31), -1, None, 'a')]"
    )
    assert rows is not None and str(rows[0][0]) == "3.50" and rows[0][2] == -1
    assert parse_mysql_rows("[(__import__('os').system('true'),)]") is None
    assert parse_mysql_rows("Error executing query: nope") is None
