"""MT/InterCode-SQL-v0 under a hostile agent: every action answers within the resource contract.

Each test names the limit of ``docs/security.md`` it checks. Wall-clock bounds are generous
(the attacks they guard against took 40 s to hours before the limits existed); memory is
measured in a child process (peak RSS growth), so a regression fails a test instead of the
test process.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv
from multiturn_envs.envs.intercode_sql.database import (
    ALLOWED_FUNCTIONS,
    SQLITE_FUNCTIONS,
    SandboxedConnection,
)
from multiturn_envs.envs.intercode_sql.functions import (
    MYSQL_FUNCTION_NAMES,
    register_mysql_functions,
)
from multiturn_envs.envs.intercode_sql.query_cache import QueryCache

TASK = "bundled/library/021"
FAST = 10.0  # seconds: a generous bound for actions that now take milliseconds


@pytest.fixture
def env() -> InterCodeSQLEnv:
    e = InterCodeSQLEnv(max_turns=None, vm_instructions=5_000_000)
    e.reset(options={"task_id": TASK})
    yield e
    e.close()


def _timed_step(env: InterCodeSQLEnv, action: str) -> tuple[str, dict, float]:
    start = time.perf_counter()
    obs, _, _, _, info = env.step(action)
    return obs, info, time.perf_counter() - start


def _run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ----------------------------------------------------------------------- memory safety
def test_fts3_tokenizer_pointer_attack_cannot_crash_the_process() -> None:
    """Limit: allow-listed functions, no virtual tables. The attack makes SQLite call through a
    pointer the agent chose (a segfault); run in a child so a regression fails this test."""
    child = _run_child(
        """
        from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv
        env = InterCodeSQLEnv(max_turns=None)
        env.reset(options={"task_id": "bundled/library/021"})
        for sql in (
            "SELECT fts3_tokenizer('evil', x'4141414141414141')",
            "CREATE VIRTUAL TABLE t USING fts3(x, tokenize=evil)",
            "INSERT INTO t VALUES ('boom')",
            "SELECT * FROM t WHERE t MATCH 'boom'",
        ):
            print(env.step(sql)[0])
        print("ALIVE")
        """
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    lines = child.stdout.splitlines()
    assert lines[-1] == "ALIVE"
    assert "function fts3_tokenizer() is not available" in lines[0]
    assert "virtual tables are not available" in lines[1]


def test_fts3_tokenizer_does_not_leak_an_address(env: InterCodeSQLEnv) -> None:
    """Limit: allow-listed functions (the one-argument form returns a libsqlite3 pointer)."""
    obs = env.step("SELECT hex(fts3_tokenizer('simple'))")[0]
    assert obs.startswith("Error executing query: not authorized: function fts3_tokenizer()")


def test_mysql_function_names_are_the_registered_ones() -> None:
    """The allow-list's MySQL half is exactly what register_mysql_functions installs."""
    raw = sqlite3.connect(":memory:")
    builtin = {r[0] for r in raw.execute("SELECT name FROM pragma_function_list")}
    register_mysql_functions(raw)
    installed = {r[0] for r in raw.execute("SELECT name FROM pragma_function_list")}
    assert installed - builtin == MYSQL_FUNCTION_NAMES - builtin
    assert ALLOWED_FUNCTIONS == SQLITE_FUNCTIONS | MYSQL_FUNCTION_NAMES
    denied = builtin - ALLOWED_FUNCTIONS
    assert {"fts3_tokenizer", "load_extension", "random", "randomblob"} <= denied


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("ATTACH ':memory:' AS x", "ATTACH/DETACH"),
        ("VACUUM", "ATTACH/DETACH"),
        ("BEGIN", "transactions are not needed"),
        ("SAVEPOINT s", "transactions are not needed"),
        ("CREATE VIRTUAL TABLE v USING rtree(id, a, b)", "virtual tables"),
        ("CREATE TABLE temp.t(a)", "temporary objects"),
        ("CREATE TEMP VIEW tv AS SELECT 1", "temporary objects"),
        ("PRAGMA writable_schema = ON", "PRAGMA writable_schema"),
        ("SELECT * FROM sqlite_stmt", "sqlite_stmt is not available"),
        ("SELECT * FROM dbstat", "dbstat is not available"),
        ("SELECT randomblob(8)", "randomblob() is not available"),
        ("SELECT sqlite_compileoption_get(0)", "is not available"),
        ("SELECT load_extension('/tmp/x.so')", "load_extension() is not available"),
    ],
)
def test_statements_and_functions_outside_the_allow_list_are_refused(
    env: InterCodeSQLEnv, sql: str, why: str
) -> None:
    """Limit: the authorizer's allow-list of statement kinds, functions and tables."""
    obs, info = env.step(sql)[0], env.current_info()
    assert obs.startswith("Error executing query: not authorized:"), obs
    assert why in obs
    assert not env.done and info["turn"] == 1  # a turn spent, the episode goes on


def test_statements_the_env_compiled_are_checked_again_for_the_agent(
    env: InterCodeSQLEnv,
) -> None:
    """Limit: the allow-list holds for text the env itself ran with the policy off (SQLite
    authorizes at compile time and Python caches compiled statements by text: the env's own
    ``DELETE FROM information_schema.TABLES`` used to run unchecked when the agent sent it)."""
    env.step("SELECT count(*) FROM information_schema.tables")  # the env refills it, trusted
    for sql in ("DELETE FROM information_schema.TABLES", "PRAGMA database_list"):
        assert env.step(sql)[0].startswith("Error executing query: not authorized"), sql
    assert env.step("SELECT count(*) FROM information_schema.tables")[0] == "[(4,)]"


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t2(a INTEGER PRIMARY KEY, b TEXT)",
        "CREATE INDEX i2 ON authors(name)",
        "CREATE VIEW v2 AS SELECT name FROM authors",
        "CREATE TRIGGER tr AFTER INSERT ON authors BEGIN SELECT 1; END",
        "ALTER TABLE loans RENAME TO loans2",
        "ALTER TABLE authors ADD COLUMN extra TEXT",
        "ALTER TABLE authors RENAME COLUMN name TO full_name",
        "INSERT INTO authors(author_id, name) VALUES (99, 'Z')",
        "REPLACE INTO authors(author_id, name) VALUES (1, 'Y')",
        "UPDATE books SET title = upper(title)",
        "DELETE FROM loans WHERE loan_id > 3",
        "DROP TABLE loans",
        "REINDEX",
        "ANALYZE",
        "EXPLAIN QUERY PLAN SELECT * FROM authors",
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 5) SELECT 1",
        "SELECT name, rank() OVER (ORDER BY author_id DESC) FROM authors",
        "SELECT json_extract('{\"a\": [1, 2]}', '$.a[1]'), '{\"b\": 3}' ->> '$.b'",
        "SELECT * FROM json_each('[1, 2]')",
        "SELECT * FROM pragma_table_info('authors')",
        "SELECT abs(-1), round(2.567, 1), sqrt(16), printf('%05d', 7), date('2023-01-02')",
        "SELECT concat(name, '!'), year('2023-05-01'), name REGEXP '^a' FROM authors",
    ],
)
def test_ordinary_sql_is_allowed(env: InterCodeSQLEnv, sql: str) -> None:
    """Limit: the allow-list keeps every kind of statement InterCode's agents write working."""
    obs = env.step(sql)[0]
    assert "not authorized" not in obs and not obs.startswith("Error"), obs


def test_create_temporary_table_is_an_ordinary_table_and_snapshots_are_exact(
    env: InterCodeSQLEnv,
) -> None:
    """Limit: no temporary objects (outside the 64 MiB bound and the snapshot); MySQL's
    CREATE TEMPORARY TABLE still works, and a restore brings back everything the agent made."""
    obs = env.step("CREATE TEMPORARY TABLE tmp AS SELECT author_id, name FROM authors")[0]
    assert "Temporary tables are ordinary tables" in obs and "Query OK" in obs
    env.step("CREATE VIEW names AS SELECT name FROM tmp")
    env.step("CREATE TRIGGER keep AFTER DELETE ON tmp BEGIN INSERT INTO tmp VALUES (0, 'x'); END")
    state = env.get_state()
    expected = env.step("SELECT count(*) FROM names")[0]
    env.step("DELETE FROM tmp")
    env.step("DROP VIEW names")
    env.set_state(state)
    assert env.step("SELECT count(*) FROM names")[0] == expected
    assert env.step("DROP TEMPORARY TABLE tmp")[0].startswith("Temporary tables")


# ----------------------------------------------------------------------- time
def test_regexp_catastrophic_backtracking_answers_at_once(env: InterCodeSQLEnv) -> None:
    """Limit: REGEXP is matched by RE2 in linear time (Python's re took hours here)."""
    obs, _, seconds = _timed_step(env, "SELECT '" + "a" * 5000 + "!' REGEXP '(a+)+$'")
    assert obs == "[(0,)]" and seconds < FAST


def test_regexp_patterns_re2_rejects_get_a_clear_error(env: InterCodeSQLEnv) -> None:
    """Limit: REGEXP patterns RE2 rejects (backreferences) or longer than 1,000 characters."""
    obs = env.step("SELECT 'aa' REGEXP '(a)\\1'")[0]
    assert obs.startswith("Error executing query: Illegal argument to a regular expression")
    assert "RE2" in obs
    obs = env.step("SELECT 'a' REGEXP '" + "a" * 1001 + "'")[0]
    assert "limited to 1,000 characters" in obs


@settings(max_examples=25, deadline=None)
@given(
    pattern=st.text(alphabet="a()+*?|^$.[]{}\\1,-", max_size=40),
    subject=st.text(alphabet="ab!", max_size=30).map(lambda s: s * 200),
)
def test_any_regexp_answers_within_the_budget(pattern: str, subject: str) -> None:
    """Limit: one REGEXP costs one linear pass; any pattern answers (a result or an error)."""
    conn = SandboxedConnection.from_script("CREATE TABLE t(a)")
    start = time.perf_counter()
    result = conn.execute(
        "SELECT ? REGEXP ?".replace("?", "'{}'").format(subject, pattern.replace("'", "''"))
    )
    assert time.perf_counter() - start < FAST
    assert result.ok or result.error
    conn.close()


def test_information_schema_with_a_recursive_view_answers(env: InterCodeSQLEnv) -> None:
    """Limit: the env's own introspection never runs agent views (MySQL lists views with no
    row count); it used to count them, unbounded, with the policy off."""
    env.step(
        "CREATE VIEW forever AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
        "SELECT x FROM r"
    )
    obs, _, seconds = _timed_step(
        env, "SELECT table_name, table_type, table_rows FROM information_schema.tables"
    )
    assert "('forever', 'VIEW', None)" in obs and "('authors', 'BASE TABLE', " in obs
    assert seconds < FAST


def test_deep_expressions_do_not_reach_sqlglot(env: InterCodeSQLEnv) -> None:
    """Limit: sqlglot gets at most 5,000 characters, 32 divisions, 64 nested parentheses (a
    10,000-deep ``1/1/...`` took 40 s and 1.3 GB there)."""
    obs, _, seconds = _timed_step(env, "SELECT " + "/".join(["1"] * 9_000))
    assert seconds < FAST
    assert "too large for the MySQL emulation" in obs and "Error executing query" in obs
    obs, _, seconds = _timed_step(env, "SELECT " + "(" * 900 + "1" + ")" * 900 + " / 2")
    assert seconds < FAST and "too large for the MySQL emulation" in obs
    obs = env.step("SELECT 7 / 2")[0]  # within the bounds MySQL's division still applies
    assert obs == "[(3.5,)]"


def test_postfix_not_null_check_is_linear() -> None:
    """Limit: mysql_strict's text checks are linear (a run of blanks was quadratic)."""
    env = InterCodeSQLEnv(max_turns=None, mysql_strict=True)
    env.reset(options={"task_id": TASK})
    obs, _, seconds = _timed_step(env, "SELECT name" + " " * 15_000 + "FROM authors LIMIT 1")
    assert seconds < FAST and obs.startswith("[(")
    env.close()


def test_one_action_shares_one_budget_across_its_statements() -> None:
    """Limit: vm_instructions per action, however many statements the emulation runs (a set
    operation used to run every branch with a budget of its own)."""
    env = InterCodeSQLEnv(max_turns=None, vm_instructions=2_000_000, query_timeout_s=30)
    env.reset(options={"task_id": TASK})
    branch = (
        "SELECT x FROM (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r "
        "LIMIT 150000) SELECT x FROM r)"
    )
    obs, _, seconds = _timed_step(env, " UNION ".join([branch] * 20))
    assert "query stopped: it exceeded the budget of 2,000,000" in obs
    assert seconds < FAST
    env.close()


def test_view_doubling_is_refused_before_sqlite_compiles_it(env: InterCodeSQLEnv) -> None:
    """Limit: max_expanded_sql (200,000 characters through views and triggers). SQLite copies
    a view into every reader before running anything: 14 doubling views took 12 s and 3.5 GB."""
    columns = ", ".join(f"author_id + {i} AS c{i}" for i in range(300))
    env.step(f"CREATE VIEW v0 AS SELECT {columns} FROM authors")
    created = 0
    while True:
        i = created + 1
        sql = f"CREATE VIEW v{i} AS SELECT * FROM v{i - 1} UNION ALL SELECT * FROM v{i - 1}"
        obs, _, seconds = _timed_step(env, sql)
        assert seconds < FAST
        if not obs.startswith("Query OK"):
            assert "expands, through the views and triggers it reaches" in obs, obs
            break
        created = i
    assert 2 <= created < 10
    obs, _, seconds = _timed_step(env, f"SELECT count(*) FROM v{created}")
    authors = int(env.step("SELECT count(*) FROM authors")[0].strip("[(,)]"))
    assert obs == f"[({authors * 2**created},)]" and seconds < FAST
    assert env.step(f"DESC v{created}")[0].startswith("[('c0'")
    reader = " UNION ALL ".join([f"SELECT c0 FROM v{created}"] * 8)
    obs, _, seconds = _timed_step(env, f"SELECT count(*) FROM ({reader})")
    assert "expands" in obs and seconds < FAST
    # built top-down, every CREATE is small (it names a view that does not exist yet)
    for i in range(14, 0, -1):
        env.step(f"CREATE VIEW w{i} AS SELECT * FROM w{i - 1} UNION ALL SELECT * FROM w{i - 1}")
    env.step(f"CREATE VIEW w0 AS SELECT {columns} FROM authors")
    for sql in (
        "SELECT count(*) FROM w14",
        "SELECT * FROM pragma_table_info('w14')",
        "DESC w14",
        'SELECT count(*) FROM "w14"',
    ):
        obs, _, seconds = _timed_step(env, sql)
        assert "expands" in obs and seconds < FAST, (sql, obs)
    obs, _, seconds = _timed_step(env, "SELECT count(*) FROM information_schema.columns")
    assert obs.startswith("[(") and seconds < FAST


def test_functions_with_absurd_arguments_answer(env: InterCodeSQLEnv) -> None:
    """Limit: our MySQL functions bound their own work (10 ** 1e9 never finished)."""
    for sql, expected in (
        ("SELECT truncate(1.5, 1000000000), truncate(1234.5, -1000000000)", "[(1.5, 0)]"),
        ("SELECT str_to_date('2023', '" + "%Y" * 500 + "')", "[(None,)]"),
        ("SELECT date_format('2023-01-01', '%d%d%d%d%d')", "[('0101010101',)]"),
    ):
        obs, _, seconds = _timed_step(env, sql)
        assert obs == expected and seconds < FAST


def test_memos_of_query_text_stay_bounded() -> None:
    """Limit: the emulation's memos (sqlglot rewrites per query) hold at most 8,192 entries and
    4,000,000 characters: distinct 20,000-character queries no longer pile up."""
    memo: QueryCache[str] = QueryCache(max_entries=10, max_chars=1_000)
    for i in range(100):
        memo.put(("db", f"q{i}"), "x" * 90, 100)
        assert len(memo) <= 10 and memo.chars <= 1_000
    assert memo.get(("db", "q99")) == "x" * 90
    assert QueryCache().max_chars == 4_000_000


# ----------------------------------------------------------------------- replies
@settings(max_examples=30, deadline=None)
@given(
    piece=st.sampled_from(
        ["```", "```sql", " ", "\n", "\t", "`", "submit", "SELECT", "(", "'", ";", "<think>", "a"]
    ),
    other=st.sampled_from(["", "```", "\n", "SELECT 1", "x"]),
    count=st.integers(1, 40_000),
)
def test_degenerate_replies_answer_within_the_contract(piece: str, other: str, count: int) -> None:
    """Limit: reply parsing is linear in the reply (core's 1,000,000-character cap first);
    one token repeated tens of thousands of times answers at once, as a turn."""
    env = InterCodeSQLEnv(max_turns=None, vm_instructions=2_000_000)
    env.reset(options={"task_id": TASK})
    start = time.perf_counter()
    obs, _, _, _, info = env.step(other + piece * count + other)
    assert time.perf_counter() - start < FAST
    assert isinstance(obs, str) and obs and info["turn"] == 1
    assert len(obs) <= env.max_observation_chars + 200
    env.close()


def test_an_over_long_reply_is_refused_unread(env: InterCodeSQLEnv) -> None:
    """Limit: core's max_action_chars (1,000,000): a turn spent, a clear message, no parsing."""
    obs, reward, terminated, truncated, info = env.step("SELECT 1 " + "x" * 1_000_000)
    assert "characters long" in obs and "at most 1,000,000" in obs
    assert info["parse_error"] and not terminated and not truncated and reward == 0.0
    assert "db" in info and "score_exact" in info  # the env's own parse-error info
    assert env.step("SELECT 1")[0] == "[(1,)]"


def test_observations_are_cut_to_max_observation_chars(env: InterCodeSQLEnv) -> None:
    """Limit: max_observation_chars (16,000 by default): a wide result is cut, and says so."""
    columns = ", ".join(["c"] * 400)
    obs = env.step(f"SELECT {columns} FROM (SELECT hex(zeroblob(60)) AS c)")[0]
    assert len(obs) <= 16_000 and obs.endswith("the first 15,935 are shown]")


# ----------------------------------------------------------------------- memory
MEMORY_CHILD = """
import json, resource
from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

env = InterCodeSQLEnv(max_turns=None, query_timeout_s=300)  # memory is measured, not time
env.reset(options={"task_id": "bundled/library/021"})
env.step("SELECT 1")
R = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT {})"
cases = {
    "hex_zeroblob": ["SELECT length(hex(zeroblob(500000000)))"],
    # 400 MB of rows, 16 MiB kept
    "results": [R.format(20000) + " SELECT hex(zeroblob(10000)) FROM r"],
    "temp_table": ["CREATE TEMP TABLE tbig(b)",
                   "INSERT INTO tbig " + R.format(2000) + " SELECT zeroblob(90000) FROM r"],
    "episode_copy": ["CREATE TABLE big(b)",
                     "INSERT INTO big " + R.format(2000) + " SELECT zeroblob(90000) FROM r"],
    "sorter": [R.format(3000) + " SELECT count(*) FROM "
               "(SELECT hex(zeroblob(45000)) || x AS b, x FROM r ORDER BY x DESC)"],
}
out = {}
for name, actions in cases.items():
    before = peak()
    obs = [env.step(a)[0] for a in actions]
    out[name] = {"growth_mb": peak() - before, "obs": obs[-1][:200] + " ... " + obs[-1][-200:]}
print(json.dumps(out))
"""


def test_memory_per_action_stays_bounded() -> None:
    """QueryLimits: max_value_bytes (100,000), max_result_bytes (16 MiB), no temporary tables,
    max_db_bytes (64 MiB), scratch storage spilled to files. Each attack used to add 1.2 to
    2.4 GB; measured in a child process as its peak RSS growth."""
    child = _run_child(MEMORY_CHILD, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout.splitlines()[-1])
    assert "values are limited to 100,000 bytes" in out["hex_zeroblob"]["obs"]
    assert "rows in total" in out["results"]["obs"]
    # a temporary table is an ordinary table of the copy here, under the copy's bound
    assert "limited to 64 MiB" in out["temp_table"]["obs"]
    assert "limited to 64 MiB" in out["episode_copy"]["obs"]
    assert out["sorter"]["obs"].startswith("[(3000,)]")  # 270 MB sorted, through files
    for name, case in out.items():
        assert case["growth_mb"] < 400, (name, case)


def test_the_old_query_seconds_still_works_for_one_release() -> None:
    with pytest.deprecated_call(match="write query_timeout_s=2.5"):
        env = InterCodeSQLEnv(max_turns=2, query_seconds=2.5)
    assert env._limits.seconds == 2.5
    env.close()
