"""MT/InterCode-SQL-v0: contract, sandboxing, MySQL habits, actions, scoring modes, snapshots."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import multiturn_envs  # noqa: F401  (registers MT/*)
from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv, SQLTask
from multiturn_envs.envs.intercode_sql.conversion import SpiderDevDatabases
from multiturn_envs.testing import check_text_env, require

HAVE_INTERCODE = importlib.util.find_spec("intercode") is not None
TOP_AUTHOR = "bundled/library/021"  # ORDER BY ... LIMIT 1
LISBON = "bundled/library/022"


@pytest.fixture
def env() -> InterCodeSQLEnv:
    e = InterCodeSQLEnv(max_turns=20)
    yield e
    e.close()


def test_conforms_to_the_contract_on_bundled_tasks() -> None:
    check_text_env(
        lambda: gym.make("MT/InterCode-SQL-v0", max_turns=5),
        task_ids=[TOP_AUTHOR, "bundled/shop/016"],
    )


def test_conforms_in_intercode_mode_with_explicit_submit() -> None:
    check_text_env(
        lambda: InterCodeSQLEnv(max_turns=4, scoring="intercode", end_on_success=False),
        task_ids=["bundled/company/012"],
        run_gymnasium_check=False,
    )


def test_conforms_on_spider_databases() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    check_text_env(lambda: InterCodeSQLEnv(max_turns=4, tasks="intercode"), hostile=False)


def test_bundled_set_size_and_levels(env: InterCodeSQLEnv) -> None:
    tasks = [env.task(t) for t in env.task_ids()]
    assert len(tasks) >= 60
    assert {t.hardness for t in tasks} == {"easy", "medium", "hard", "extra"}
    assert {t.db for t in tasks} == {"library", "company", "shop"}


def test_expert_solves_and_error_does_not(env: InterCodeSQLEnv) -> None:
    rng = np.random.default_rng(0)
    for task_id in env.task_ids():
        env.reset(seed=0, options={"task_id": task_id})
        assert env.gold_result().rows, f"{task_id}: bundled golds return rows"
        wrong = env.error_action(rng)
        assert env.score_action(wrong) < 1.0, (task_id, wrong)
        _, reward, terminated, _, info = env.step(env.expert_action())
        assert terminated and info["success"] and reward == 1.0, task_id


def test_agent_writes_never_reach_the_gold_or_other_episodes(env: InterCodeSQLEnv) -> None:
    env.reset(seed=0, options={"task_id": TOP_AUTHOR})
    gold_before = env.gold_result().rows
    for sql in ("DELETE FROM loans", "DROP TABLE authors", "UPDATE books SET author_id = NULL"):
        obs, *_ = env.step(sql)
        assert "Error" not in obs or "authors" in obs
    obs, _, terminated, _, info = env.step("SELECT count(*) FROM loans")
    assert "[(0,)]" in obs and not terminated
    assert env.gold_result().rows == gold_before
    env.reset(seed=0, options={"task_id": TOP_AUTHOR})
    _, _, terminated, _, info = env.step(env.expert_action())
    assert terminated and info["success"]
    other = InterCodeSQLEnv()
    other.reset(options={"task_id": TOP_AUTHOR})
    assert "[(60,)]" in other.step("SELECT count(*) FROM loans")[0]
    other.close()


def test_empty_result_hack_does_not_work(env: InterCodeSQLEnv) -> None:
    env.reset(seed=0, options={"task_id": LISBON})
    env.step("DELETE FROM loans")
    _, _, _, _, info = env.step(env.expert_action())  # the gold query now returns nothing
    assert info["step_score"] == 0.0 and not info["success"]


def test_nothing_reaches_files_on_disk(env: InterCodeSQLEnv, tmp_path: Path) -> None:
    env.reset(seed=0, options={"task_id": TOP_AUTHOR})
    target = tmp_path / "leak.db"
    for sql in (
        f"ATTACH '{target}' AS leak",
        f"VACUUM INTO '{target}'",
        "PRAGMA temp_store = FILE",
        "PRAGMA writable_schema = ON",
        "SELECT load_extension('/tmp/x')",
        "BEGIN",
        "SAVEPOINT s",
        "DETACH main",
    ):
        obs, *_ = env.step(sql)
        assert obs.startswith("Error executing query:"), (sql, obs)
    assert not target.exists()


def test_spider_cache_files_stay_untouched() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks="intercode")
    task = env.task_ids()[0]
    env.reset(options={"task_id": task})
    path = SpiderDevDatabases().path(env.task().db)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    tables = env.step("SHOW TABLES")[0]
    for (table,) in eval(tables):
        env.step(f"DROP TABLE {table}")
    assert env.step("SHOW TABLES")[0].startswith("[]")
    env.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_mysql_habits(env: InterCodeSQLEnv) -> None:
    env.reset(seed=0, options={"task_id": TOP_AUTHOR})
    assert env.step("SHOW TABLES")[0] == "[('authors',), ('books',), ('loans',), ('members',)]"
    desc = env.step("DESC books")[0]
    # the Type column as bytes, as MySQL's connector returned it in InterCode's later runs
    assert desc.startswith("[('book_id', b'int', 'NO', 'PRI', None, '')")
    assert env.step("DESCRIBE `books`")[0] == desc
    assert env.step("SHOW COLUMNS FROM library.books")[0] == desc
    assert env.step("USE library")[0] == "Database changed"
    assert "unknown database" in env.step("USE world_1")[0]
    assert "Tables_in" not in env.step("SHOW DATABASES")[0]
    obs, _, _, _, info = env.step("SELECT concat(name, '!') FROM authors LIMIT 1, 1")
    assert obs == "[('Ben Okafor!',)]"
    obs, _, _, _, info = env.step("SELECT name FROM library.authors WHERE author_id = 1")
    assert info["transpiled"] and "MySQL-to-SQLite rewrite" in obs and "[('Ana Ruiz',)]" in obs
    obs = env.step("SELECT nme FROM authors")[0]
    assert obs.startswith("Error executing query: Unknown column 'nme'")
    obs = env.step("SELECT * FROM nope")[0]
    assert obs == "Error executing query: Table 'library.nope' doesn't exist"


def test_describe_types_as_str_like_the_gpt35_run() -> None:
    env = InterCodeSQLEnv(describe_types="str")
    env.reset(options={"task_id": TOP_AUTHOR})
    assert env.step("DESC books")[0].startswith("[('book_id', 'int', 'NO', 'PRI', None, '')")
    env.close()
    with pytest.raises(ValueError, match="describe_types"):
        InterCodeSQLEnv(describe_types="text")


def test_runaway_queries_stop_deterministically() -> None:
    env = InterCodeSQLEnv(vm_instructions=2_000_000)
    env.reset(options={"task_id": TOP_AUTHOR})
    runaway = (
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
    )
    first = env.step(runaway)[0]
    assert "query stopped" in first and env.step(runaway)[0] == first
    env.close()


def test_huge_results_are_truncated_with_a_count(env: InterCodeSQLEnv) -> None:
    env.reset(options={"task_id": TOP_AUTHOR})
    obs = env.step("SELECT * FROM loans AS a, loans AS b")[0]
    assert obs.endswith("[3600 rows in total; the first 20 are shown]")
    assert len(obs) < 5000


def test_action_forms_and_submit(env: InterCodeSQLEnv) -> None:
    env = InterCodeSQLEnv(end_on_success=False)
    gold = env.task(TOP_AUTHOR).gold
    env.reset(options={"task_id": TOP_AUTHOR})
    obs, reward, terminated, _, info = env.step(f"Here it is:\n```sql\n{gold};\n```")
    assert not terminated and info["success"] and info["step_score"] == 1.0 and reward == 0.0
    obs, reward, terminated, _, info = env.step("submit")
    assert terminated and reward == 1.0 and "correct" in obs
    env.reset(options={"task_id": TOP_AUTHOR})
    _, reward, terminated, _, info = env.step(f"{gold}\nsubmit")
    assert terminated and reward == 1.0 and info["success"]
    env.reset(options={"task_id": TOP_AUTHOR})
    obs, _, terminated, _, info = env.step("I think the answer is Emma.")
    assert info["parse_error"] and not terminated and "No SQL" in obs
    _, reward, terminated, _, info = env.step("SUBMIT")
    assert terminated and reward == 0.0 and not info["success"]
    env.close()


def test_last_turn_rewards_the_last_result() -> None:
    env = InterCodeSQLEnv(max_turns=2, end_on_success=False)
    env.reset(options={"task_id": TOP_AUTHOR})
    env.step(env.task().gold)
    _, reward, terminated, truncated, info = env.step("SHOW TABLES")
    assert truncated and not terminated and reward == 0.0 and not info["success"]
    env.reset(options={"task_id": TOP_AUTHOR})
    env.step("SHOW TABLES")
    _, reward, _, truncated, info = env.step(env.task().gold)
    assert truncated and reward == 1.0 and info["success"]
    env.close()


def test_scoring_modes_disagree_where_documented() -> None:
    exact = InterCodeSQLEnv(end_on_success=False)
    inter = InterCodeSQLEnv(end_on_success=False, scoring="intercode")
    task = "bundled/library/003"  # authors from Sweden: no ORDER BY
    for e in (exact, inter):
        e.reset(options={"task_id": task})
    reversed_order = "SELECT name FROM authors WHERE country = 'Sweden' ORDER BY name DESC"
    swapped_cols = "SELECT name, 1 FROM authors WHERE country = 'Sweden'"
    assert exact.score_action(reversed_order) == 1.0
    assert inter.score_action(reversed_order) == 0.0  # tau = -1, clipped
    info = inter.step(reversed_order)[4]
    assert info["intercode_reward_raw"] == -1.0
    assert exact.score_action(swapped_cols) == inter.score_action(swapped_cols) == 0.0
    task = "bundled/company/008"  # avg salary per department: column order
    for e in (exact, inter):
        e.reset(options={"task_id": task})
    cols = (
        "SELECT avg(T1.salary), T2.name FROM employees AS T1 JOIN departments AS T2 "
        "ON T1.dept_id = T2.dept_id GROUP BY T2.dept_id"
    )
    assert exact.score_action(cols) == 1.0 and inter.score_action(cols) == 0.0
    exact.close()
    inter.close()


def test_state_round_trip_includes_database_contents(env: InterCodeSQLEnv) -> None:
    env.reset(seed=3, options={"task_id": TOP_AUTHOR})
    env.step("DELETE FROM loans WHERE loan_id > 10")
    snapshot = env.get_state()
    assert snapshot["env"]["db_bytes"] is not None
    after = [env.step("SELECT count(*) FROM loans")[0], env.step("DROP TABLE loans")[0]]
    env.set_state(snapshot)
    assert [env.step("SELECT count(*) FROM loans")[0], env.step("DROP TABLE loans")[0]] == after
    other = InterCodeSQLEnv()
    other.reset(options={"task_id": "bundled/shop/001"})
    other.set_state(snapshot)
    assert other.step("SELECT count(*) FROM loans")[0] == "[(10,)]"
    other.close()


def test_clean_snapshots_skip_the_database_bytes(env: InterCodeSQLEnv) -> None:
    env.reset(options={"task_id": TOP_AUTHOR})
    env.step("SELECT * FROM books")
    assert env.get_state()["env"]["db_bytes"] is None


def test_custom_tasks_and_bad_golds() -> None:
    task = SQLTask("mine/1", "shop", "How many products?", "SELECT count(*) FROM products", "easy")
    env = InterCodeSQLEnv(tasks=[task])
    env.reset()
    assert env.step("SELECT count(*) FROM products")[4]["success"]
    bad = InterCodeSQLEnv(tasks=[SQLTask("bad/1", "shop", "?", "SELECT nope FROM products")])
    with pytest.raises(RuntimeError, match="gold query of bad/1 fails"):
        bad.reset()
    with pytest.raises(ValueError, match="scoring"):
        InterCodeSQLEnv(scoring="fuzzy")
    env.close()
    bad.close()


def test_conforms_in_strict_mysql_mode_on_spider_databases() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    check_text_env(
        lambda: InterCodeSQLEnv(max_turns=4, tasks="intercode", mysql_strict=True),
        hostile=False,
        run_gymnasium_check=False,
    )


def test_a_nul_byte_before_a_semicolon_is_an_error_not_an_exception(env: InterCodeSQLEnv) -> None:
    env.reset(options={"task_id": TOP_AUTHOR})
    obs = env.step("SELECT\x00;")[0]
    assert obs.startswith("Error executing query:")
