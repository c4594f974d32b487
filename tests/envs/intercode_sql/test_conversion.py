"""The MySQL dump -> SQLite conversion of the Spider dev databases (needs intercode-bench)."""

from __future__ import annotations

import hashlib
import importlib.util
import sqlite3
from pathlib import Path

import pytest

from multiturn_envs.envs.intercode_sql.conversion import (
    SpiderDevDatabases,
    mysql_statement_to_sqlite,
    split_dump,
)
from multiturn_envs.envs.intercode_sql.tasks import load_intercode_package_tasks
from multiturn_envs.testing import require

HAVE_INTERCODE = importlib.util.find_spec("intercode") is not None


@pytest.fixture(scope="module")
def spider(tmp_path_factory: pytest.TempPathFactory) -> SpiderDevDatabases:
    require(HAVE_INTERCODE, "the intercode-bench package")
    dbs = SpiderDevDatabases(cache_dir=tmp_path_factory.mktemp("cache"))
    for name in dbs.names():
        dbs.path(name)
    return dbs


def test_all_twenty_databases_and_81_tables_convert(spider: SpiderDevDatabases) -> None:
    names = spider.names()
    assert len(names) == 20 and "world_1" in names and "pets_1" in names
    n_tables = 0
    for name in names:
        conn = sqlite3.connect(spider.path(name))
        tables = conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for (table,) in tables:
            assert conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] >= 0
        n_tables += len(tables)
        conn.close()
    assert n_tables == 81


def test_every_packaged_gold_query_executes(spider: SpiderDevDatabases) -> None:
    tasks = load_intercode_package_tasks()
    assert len(tasks) == 23
    empty = 0
    for task in tasks:
        conn = sqlite3.connect(spider.path(task.db))
        rows = conn.execute(task.gold).fetchall()  # raises if the conversion broke it
        empty += not rows
        conn.close()
    assert empty == 3  # as the field notes measured


def test_text_columns_are_case_insensitive_like_mysql(spider: SpiderDevDatabases) -> None:
    conn = sqlite3.connect(spider.path("pets_1"))
    assert conn.execute("SELECT count(*) FROM pets WHERE pettype = 'CAT'").fetchone()[0] > 0


def test_cache_is_reused_not_rewritten(spider: SpiderDevDatabases) -> None:
    path = spider.path("pets_1")
    before = (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    again = SpiderDevDatabases(cache_dir=spider.cache_dir.parent.parent).path("pets_1")
    assert again == path
    assert (again.stat().st_mtime_ns, hashlib.sha256(again.read_bytes()).hexdigest()) == before


def test_cache_dir_follows_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(HAVE_INTERCODE, "the intercode-bench package")
    monkeypatch.setenv("MULTITURN_ENVS_CACHE", str(tmp_path))
    assert SpiderDevDatabases().cache_dir.is_relative_to(tmp_path)


def test_split_and_convert_a_small_dump() -> None:
    dump = """-- comment
CREATE DATABASE IF NOT EXISTS `a` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;
USE `a`;
/*!40101 SET NAMES utf8 */;
DROP TABLE IF EXISTS `t`;
CREATE TABLE `t` (
  `id` int NOT NULL AUTO_INCREMENT,
  `name` varchar(20) COLLATE utf8mb4_general_ci DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `name_u` (`name`),
  KEY `k` (`name`(10))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
LOCK TABLES `t` WRITE;
INSERT INTO `t` VALUES (1,'it\\'s'),(2,'Bob');
UNLOCK TABLES;
USE `b`;
"""
    per_db = split_dump(dump)
    assert list(per_db) == ["a", "b"] and per_db["b"] == []
    conn = sqlite3.connect(":memory:")
    for stmt in per_db["a"]:
        for sql in mysql_statement_to_sqlite(stmt):
            conn.execute(sql)
    assert conn.execute("SELECT name FROM t WHERE name = 'bob'").fetchall() == [("Bob",)]
    assert conn.execute("SELECT name FROM t WHERE id = 1").fetchall() == [("it's",)]
