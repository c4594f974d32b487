"""MySQL 8 semantics on SQLite: functions and clock, PAD SPACE, row order, strictness, catalog."""

from __future__ import annotations

import datetime as dt
import importlib.util
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv, SQLTask
from multiturn_envs.envs.intercode_sql.database import QueryResult
from multiturn_envs.envs.intercode_sql.functions import (
    PAD_SPACE_COLLATION,
    MySQLClock,
    mysql_surface,
    register_mysql_functions,
)
from multiturn_envs.envs.intercode_sql.mysql_order import order_like_mysql, run_set_operation
from multiturn_envs.envs.intercode_sql.mysql_rejects import mysql_rejects
from multiturn_envs.envs.intercode_sql.mysql_schema import parse_create_table
from multiturn_envs.testing import require

HAVE_INTERCODE = importlib.util.find_spec("intercode") is not None
CLOCK = dt.datetime(2024, 2, 29, 8, 30, 0)
TOY = """
CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT COLLATE NOCASE, nation TEXT COLLATE NOCASE,
                     city TEXT COLLATE MYSQL_GENERAL_CI, team INTEGER);
CREATE INDEX people_team ON people (team);
INSERT INTO people VALUES (1, 'Ann', 'Russia', 'Aberdeen ', 2),
  (2, 'Bob', 'Bulgaria', 'Oslo', 1), (3, 'Cid', 'Russia', 'aberdeen', 2),
  (4, 'Dee', 'Chad', 'Rome', 1), (5, 'Eve', 'Bulgaria', 'Oslo', 3);
CREATE TABLE fans (id INTEGER PRIMARY KEY, person INTEGER, name TEXT COLLATE NOCASE);
INSERT INTO fans VALUES (1, 4, 'Dee'), (2, 1, 'ann'), (3, 9, 'Zed');
"""


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[InterCodeSQLEnv]:
    conn = sqlite3.connect(tmp_path / "toy.sqlite")
    register_mysql_functions(conn)
    conn.executescript(TOY)
    conn.close()
    env = InterCodeSQLEnv(
        tasks=[SQLTask("toy/1", "toy", "Names?", "SELECT name FROM people")],
        db_dir=tmp_path,
        max_turns=None,
        clock=CLOCK,
        end_on_success=False,
    )
    env.reset(options={"task_id": "toy/1"})
    yield env
    env.close()


def rows(env: InterCodeSQLEnv, sql: str) -> list[tuple[object, ...]]:
    env.step(sql)
    result = env.last_result
    assert result is not None and result.ok, (sql, result)
    return list(result.rows or [])


# ------------------------------------------------------------------ functions and the clock
def test_date_functions_read_the_fixed_clock(toy: InterCodeSQLEnv) -> None:
    sql = "SELECT CURDATE(), NOW(), CURRENT_DATE, CURRENT_TIMESTAMP, date('now'), YEAR(NOW())"
    assert rows(toy, sql) == [
        (
            "2024-02-29",
            "2024-02-29 08:30:00",
            "2024-02-29",
            "2024-02-29 08:30:00",
            "2024-02-29",
            2024,
        )
    ]
    # the same query gives the same rows later in the episode and in a new one (exact replay)
    assert rows(toy, sql) == rows(toy, sql)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 'Abc' REGEXP '^a', 'abc' REGEXP 'x|z', NULL REGEXP 'a'", (1, 0, None)),
        ("SELECT FROM_UNIXTIME(86400), FROM_UNIXTIME(0, '%Y')", ("1970-01-02 00:00:00", "1970")),
        ("SELECT STR_TO_DATE('May 26, 1986', '%M %d, %Y')", ("1986-05-26",)),
        ("SELECT STR_TO_DATE('26/05/1986 13:05', '%d/%m/%Y %H:%i')", ("1986-05-26 13:05:00",)),
        ("SELECT TIMESTAMPDIFF(YEAR, '1986-05-26', CURDATE())", (37,)),
        ("SELECT TIMESTAMPDIFF(MONTH, '2024-01-31', '2024-02-29'), "
         "TIMESTAMPDIFF(DAY, '2024-02-28', '2024-03-01')", (0, 2)),
        ("SELECT DATEDIFF('2024-03-01', '2024-02-28')", (2,)),
        ("SELECT DATE_FORMAT('2024-02-29 08:05:00', '%W %e %M %Y %H:%i %%')",
         ("Thursday 29 February 2024 08:05 %",)),
        ("SELECT left('abcdef', 2), right('abcdef', 2), 'left(' ", ("ab", "ef", "left(")),
        ("SELECT IF(1 > 0, 'y', 'n'), CONCAT('a', NULL), CONCAT_WS('-', 'a', NULL, 'b')",
         ("y", None, "a-b")),
        ("SELECT HOUR('2024-02-29 08:30:00'), MINUTE('08:30:15'), DAYOFMONTH('2024-02-29')",
         (8, 30, 29)),
        ("SELECT UNIX_TIMESTAMP('1970-01-02'), TRUNCATE(2.789, 1)", (86400, 2.7)),
    ],
)  # fmt: skip
def test_mysql_functions(toy: InterCodeSQLEnv, sql: str, expected: tuple[object, ...]) -> None:
    assert rows(toy, sql) == [expected]


def test_rand_is_deterministic_per_statement(toy: InterCodeSQLEnv) -> None:
    sql = "SELECT name FROM people ORDER BY RAND()"
    first = rows(toy, sql)
    assert sorted(first) == sorted(rows(toy, "SELECT name FROM people"))
    assert rows(toy, sql) == first
    toy.reset(options={"task_id": "toy/1"})
    assert rows(toy, sql) == first
    assert rows(toy, "SELECT RAND(7) = RAND(7), RAND() BETWEEN 0 AND 1") == [(1, 1)]


def test_clock_rewrite_leaves_strings_alone() -> None:
    clock = MySQLClock(CLOCK)
    assert mysql_surface("SELECT 'CURRENT_DATE', CURRENT_DATE", clock) == (
        "SELECT 'CURRENT_DATE', curdate()"
    )
    assert "'2024-02-29 08:30:00'" in mysql_surface("SELECT date('now')", clock)
    assert mysql_surface("SELECT * FROM t WHERE note = 'now'", clock).endswith("'now'")
    assert mysql_surface("SELECT a FROM x LEFT JOIN y ON 1", clock) == (
        "SELECT a FROM x LEFT JOIN y ON 1"
    )


# ------------------------------------------------------------------ PAD SPACE and case
def test_pad_space_collation_compares_like_mysql(toy: InterCodeSQLEnv) -> None:
    assert rows(toy, "SELECT id FROM people WHERE city = 'ABERDEEN'") == [(1,), (3,)]
    assert rows(toy, "SELECT count(DISTINCT city) FROM people") == [(3,)]
    assert rows(toy, "SELECT id FROM people WHERE city IN ('oslo ')") == [(2,), (5,)]
    conn = sqlite3.connect(":memory:")
    register_mysql_functions(conn)
    (equal,) = conn.execute(f"SELECT 'Liège  ' = 'LIEGE' COLLATE {PAD_SPACE_COLLATION}").fetchone()
    assert equal == 1


def test_conversion_gives_pad_space_to_columns_with_trailing_spaces() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks=[SQLTask("f", "flight_2", "?", "SELECT 1")], max_turns=None)
    env.reset(options={"task_id": "f"})
    result = env.run_query("SELECT AirportCode FROM airports WHERE city = 'Aberdeen'")[0]
    assert result.rows == [("ABR",), ("APG",)]  # stored as 'Aberdeen ' (with the space)
    env.close()


# ------------------------------------------------------------------ row order
def test_group_by_without_index_keeps_first_appearance(toy: InterCodeSQLEnv) -> None:
    # MySQL 8 groups through a temporary table: Russia (id 1) before Bulgaria (id 2)
    assert rows(toy, "SELECT nation, count(*) FROM people GROUP BY nation") == [
        ("Russia", 2), ("Bulgaria", 2), ("Chad", 1)
    ]  # fmt: skip
    toy.mysql_row_order = False  # plain SQLite sorts the groups
    assert rows(toy, "SELECT nation, count(*) FROM people GROUP BY nation")[0] == ("Bulgaria", 2)


def test_group_by_an_indexed_key_and_distinct_aggregates_come_in_key_order(
    toy: InterCodeSQLEnv,
) -> None:
    assert rows(toy, "SELECT team, count(*) FROM people GROUP BY team") == [(1, 2), (2, 2), (3, 1)]
    sql = "SELECT nation FROM people GROUP BY nation ORDER BY count(DISTINCT id) DESC LIMIT 1"
    assert rows(toy, sql) == [("Bulgaria",)]  # MySQL groups by sorting for COUNT(DISTINCT)


def test_order_by_ties_keep_the_input_order(toy: InterCodeSQLEnv) -> None:
    sql = "SELECT nation, count(*) AS n FROM people GROUP BY nation ORDER BY n DESC"
    assert rows(toy, sql) == [("Russia", 2), ("Bulgaria", 2), ("Chad", 1)]
    assert rows(toy, "SELECT name FROM people ORDER BY team LIMIT 2") == [("Bob",), ("Dee",)]
    sql = "SELECT nation FROM people GROUP BY nation ORDER BY count(*) DESC LIMIT 1"
    assert rows(toy, sql) == [("Russia",)]


def test_set_operations_keep_first_appearance(toy: InterCodeSQLEnv) -> None:
    assert rows(toy, "SELECT name FROM fans UNION SELECT name FROM people") == [
        ("Dee",), ("ann",), ("Zed",), ("Bob",), ("Cid",), ("Eve",)
    ]  # fmt: skip
    assert rows(toy, "SELECT name FROM people INTERSECT SELECT name FROM fans") == [
        ("Ann",), ("Dee",)
    ]  # fmt: skip
    assert rows(toy, "SELECT name FROM people EXCEPT SELECT name FROM fans") == [
        ("Bob",), ("Cid",), ("Eve",)
    ]  # fmt: skip
    assert len(rows(toy, "SELECT nation FROM people UNION ALL SELECT name FROM fans")) == 8


def test_order_rewrites_only_what_they_can() -> None:
    indexed = {"people": frozenset({"id", "team"})}
    assert order_like_mysql("SELECT nation FROM people GROUP BY nation", indexed) == (
        "SELECT nation FROM people GROUP BY nation ORDER BY MIN(people.rowid) NULLS LAST"
    )
    assert order_like_mysql("SELECT team FROM people GROUP BY team", indexed) is None
    assert order_like_mysql("SELECT x FROM (SELECT 1 AS x) GROUP BY x", indexed) is None
    assert order_like_mysql("SELECT count(*) FROM people", indexed) is None
    assert order_like_mysql("not sql at all (", indexed) is None

    def fail(sql: str) -> QueryResult:
        return QueryResult(error="no such table")

    assert run_set_operation("SELECT 1 UNION SELECT 2", fail) is None
    assert run_set_operation("SELECT 1 UNION SELECT 2 ORDER BY 1", fail) is None


# ------------------------------------------------------------------ strictness
DDL = """CREATE TABLE `Templates` (
  `Template_ID` int NOT NULL AUTO_INCREMENT,
  `Version_Number` int NOT NULL,
  `Template_Type_Code` char(15) COLLATE utf8mb4_general_ci DEFAULT NULL,
  `Note` varchar(20) COLLATE utf8mb4_general_ci DEFAULT 'none',
  PRIMARY KEY (`Template_ID`),
  UNIQUE KEY `u_note` (`Note`),
  KEY `templates_FK_0_0` (`Template_Type_Code`)
) ENGINE=InnoDB"""


def test_mysql_declarations_give_desc_rows() -> None:
    table = parse_create_table(DDL)
    assert table is not None
    assert table.describe() == [
        ("Template_ID", "int", "NO", "PRI", None, "auto_increment"),
        ("Version_Number", "int", "NO", "", None, ""),
        ("Template_Type_Code", "char(15)", "YES", "MUL", None, ""),
        ("Note", "varchar(20)", "YES", "UNI", "none", ""),
    ]
    assert table.indexed_first_columns() == {"template_id", "note", "template_type_code"}


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("SELECT min(Version_Number), Template_Type_Code FROM Templates",
         "In aggregated query without GROUP BY, expression #2 of SELECT list contains "
         "nonaggregated column 'db.Templates.Template_Type_Code'"),
        ("SELECT Template_ID FROM Templates GROUP BY Template_Type_Code",
         "Expression #1 of SELECT list is not in GROUP BY clause"),
        ("SELECT count (*) FROM Templates", "near '*) FROM Templates' at line 1"),
        ("SELECT * FROM Templates WHERE Note NOT NULL", "near 'NULL' at line 1"),
        ("SELECT * FROM Templates WHERE Template_ID IN (SELECT Template_ID FROM Templates LIMIT 1)",
         "doesn't yet support 'LIMIT & IN/ALL/ANY/SOME subquery'"),
        ("SELECT count(*) FROM (SELECT 1)", "Every derived table must have its own alias"),
        ("SELECT avg(x) FROM SHOW", "right syntax to use near 'SHOW'"),
    ],
)  # fmt: skip
def test_mysql_rejects_what_mysql_8_refuses(sql: str, error: str) -> None:
    table = parse_create_table(DDL)
    assert table is not None
    reason = mysql_rejects(sql, {"templates": table}, "db")
    assert reason is not None and error in reason


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT Template_Type_Code, count(*) FROM Templates GROUP BY Template_Type_Code",
        "SELECT Template_ID, Note FROM Templates GROUP BY Template_ID",  # functionally dependent
        "SELECT Note, max(Version_Number) FROM Templates GROUP BY Note",  # via the unique key
        "SELECT Note FROM Templates WHERE Version_Number > "
        "(SELECT avg(Version_Number) FROM Templates)",
        "SELECT * FROM Templates WHERE Note IS NOT NULL AND Note = 'count (x)'",
        "SELECT count(*) FROM (SELECT 1) AS t",
    ],
)  # fmt: skip
def test_mysql_accepts_what_mysql_8_accepts(sql: str) -> None:
    table = parse_create_table(DDL)
    assert table is not None
    assert mysql_rejects(sql, {"templates": table}, "db") is None


def test_join_equalities_carry_functional_dependence() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks="intercode", max_turns=None)
    tables = env.mysql_tables("concert_singer")
    ok = (
        "SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2 "
        "ON T1.stadium_id = T2.stadium_id GROUP BY T1.stadium_id"
    )
    assert mysql_rejects(ok, tables, "concert_singer") is None
    env.close()


def test_strict_mode_answers_with_mysqls_error_and_default_mode_runs(tmp_path: Path) -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    sql = "SELECT min(Version_Number), template_type_code FROM Templates"
    for strict in (False, True):
        task = SQLTask("t", "cre_Doc_Template_Mgt", "?", "SELECT 1")
        env = InterCodeSQLEnv(tasks=[task], max_turns=None, mysql_strict=strict)
        env.reset(options={"task_id": "t"})
        obs = env.step(sql)[0]
        if strict:
            assert obs.startswith("Error executing query: In aggregated query without GROUP BY")
        else:
            assert obs == "[(0, 'PP')]"
        env.close()


# ------------------------------------------------------------------ catalog and error texts
def test_information_schema_describes_the_episode_database(toy: InterCodeSQLEnv) -> None:
    sql = "SELECT table_name, table_rows FROM information_schema.tables WHERE table_schema = 'TOY'"
    assert rows(toy, sql) == [("fans", 3), ("people", 5)]
    assert rows(toy, "SELECT * FROM INFORMATION_SCHEMA.TABLES WHERE table_schema = 'other'") == []
    sql = "SELECT column_name FROM information_schema.columns WHERE table_name = 'fans'"
    assert rows(toy, sql) == [("id",), ("person",), ("name",)]
    obs = toy.step("DELETE FROM information_schema.tables")[0]
    assert "information_schema is read-only" in obs
    toy.step("CREATE TABLE extra (x INTEGER)")
    assert rows(toy, "SELECT count(*) FROM information_schema.tables") == [(3,)]


def test_mysql_error_texts(toy: InterCodeSQLEnv) -> None:
    assert (
        toy.step("SELECT * FROM Nope")[0] == "Error executing query: Table 'toy.nope' doesn't exist"
    )
    obs = toy.step("SELECT `nation2` FROM people")[0]
    assert obs == "Error executing query: Unknown column 'nation2' in 'field list'"
    assert toy.step("SHOW TABLES")[0] == "[('fans',), ('people',)]"


def test_spider_desc_is_mysqls_own() -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    env = InterCodeSQLEnv(tasks=[SQLTask("c", "car_1", "?", "SELECT 1")], max_turns=None)
    env.reset(options={"task_id": "c"})
    assert env.step("DESC model_list")[0] == (
        "[('ModelId', b'int', 'NO', 'PRI', None, 'auto_increment'), "
        "('Maker', b'int', 'YES', 'MUL', None, ''), "
        "('Model', b'varchar(255)', 'YES', 'UNI', None, '')]"
    )
    env.close()


def test_division_is_mysqls_exact_division(toy: InterCodeSQLEnv) -> None:
    assert rows(toy, "SELECT 7/2, 7 DIV 2, 1/0, '7/2'") == [(3.5, 3, None, "7/2")]
    sql = "SELECT count(*) * 100 / (SELECT count(*) FROM people) FROM people WHERE team = 1"
    assert rows(toy, sql) == [(40.0,)]
    toy.step("SELECT nation / 0 FROM people /* a/b */")  # whatever runs, runs as before
    assert toy.last_result is not None and toy.last_result.ok


@pytest.mark.parametrize(
    ("sql", "clause"),
    [
        ("SELECT nme FROM people", "field list"),
        ("SELECT name FROM people WHERE nme = 1 ORDER BY nme", "where clause"),
        ("SELECT p.name FROM people AS p JOIN fans AS f ON f.nme = p.id", "on clause"),
        ("SELECT name FROM people GROUP BY nme", "group statement"),
        ("SELECT name FROM people ORDER BY nme", "order clause"),
    ],
)
def test_unknown_column_errors_name_mysqls_clause(
    toy: InterCodeSQLEnv, sql: str, clause: str
) -> None:
    obs = toy.step(sql)[0]
    assert obs.startswith("Error executing query: Unknown column '") and f"in '{clause}'" in obs


def test_syntax_errors_quote_the_rest_of_the_query_as_mysql_does(toy: InterCodeSQLEnv) -> None:
    head = (
        "Error executing query: You have an error in your SQL syntax; check the manual that "
        "corresponds to your MySQL server version for the right syntax to use near "
    )
    assert toy.step("SELECT * FORM people")[0] == head + "'FORM people' at line 1"
    assert toy.step("SELECT name\nFROM people WHERE")[0] == head + "'' at line 2"
    long = "SELECT name FROM people WHERE id = 1 " + "AND id = 1 " * 12
    assert len(toy.step(long + "GROUP")[0]) <= len(head) + 80 + len("'' at line 1")
