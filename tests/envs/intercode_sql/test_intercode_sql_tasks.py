"""Task loaders: InterCode JSON/CSV, Spider JSON/JSONL, and the datasets route."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from multiturn_envs.envs.intercode_sql import InterCodeSQLEnv, load_spider_dataset, load_task_file
from multiturn_envs.envs.intercode_sql.actions import parse_action
from multiturn_envs.testing import require

SPIDER = [
    {"db_id": "shop", "question": "How many customers?", "query": "SELECT count(*) FROM customers"},
    {"db_id": "shop", "question": "Cheapest?", "query": "SELECT min(price) FROM products"},
]
INTERCODE = [
    {
        "db": "library",
        "query": "How many books?",
        "gold": "SELECT count(*) FROM books",
        "hardness": "easy",
        "db_tables": {},
    },
]


def test_intercode_json_and_spider_json_and_jsonl(tmp_path: Path) -> None:
    (tmp_path / "ic.json").write_text(json.dumps(INTERCODE))
    (tmp_path / "sp.json").write_text(json.dumps(SPIDER))
    (tmp_path / "sp.jsonl").write_text("\n".join(json.dumps(r) for r in SPIDER))
    ic = load_task_file(tmp_path / "ic.json")
    assert [(t.task_id, t.db, t.question, t.hardness) for t in ic] == [
        ("ic/library/001", "library", "How many books?", "easy")
    ]
    assert load_task_file(tmp_path / "sp.json")[1].gold == "SELECT min(price) FROM products"
    assert [t.gold for t in load_task_file(tmp_path / "sp.jsonl")] == [r["query"] for r in SPIDER]
    env = InterCodeSQLEnv(tasks=str(tmp_path / "sp.json"))
    env.reset(options={"task_id": "sp/shop/002"})
    assert env.step("SELECT price FROM products ORDER BY price LIMIT 1")[4]["success"]
    env.close()
    (tmp_path / "bad.json").write_text(json.dumps([{"question": "?"}]))
    with pytest.raises(ValueError, match="neither Spider"):
        load_task_file(tmp_path / "bad.json")


def test_spider_records_through_datasets(tmp_path: Path) -> None:
    require(importlib.util.find_spec("datasets") is not None, "the datasets package")
    path = tmp_path / "dev.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in SPIDER))
    tasks = load_spider_dataset("json", split="train", data_files=str(path))
    assert [t.question for t in tasks] == ["How many customers?", "Cheapest?"]


def test_db_dir_in_spider_layout(tmp_path: Path) -> None:
    import sqlite3

    (tmp_path / "toy").mkdir()
    conn = sqlite3.connect(tmp_path / "toy" / "toy.sqlite")
    conn.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2);")
    conn.close()
    from multiturn_envs.envs.intercode_sql import SQLTask

    env = InterCodeSQLEnv(
        tasks=[SQLTask("toy/1", "toy", "Sum?", "SELECT sum(x) FROM t")], db_dir=tmp_path
    )
    env.reset()
    assert env.step("SELECT 3")[4]["success"]
    env.step("DELETE FROM t") if not env.done else None
    env.close()
    check = sqlite3.connect(tmp_path / "toy" / "toy.sqlite")
    assert check.execute("SELECT count(*) FROM t").fetchone()[0] == 2


@pytest.mark.parametrize(
    ("reply", "sql", "submit", "error"),
    [
        ("SELECT 1", "SELECT 1", False, False),
        ("```sql\nSELECT 1;\n```", "SELECT 1;", False, False),
        ("Let me look.\n```\nSHOW TABLES\n```\nsubmit", "SHOW TABLES", True, False),
        ("submit", None, True, False),
        ("SELECT 2\nsubmit", "SELECT 2", True, False),
        ("The answer is 3.", None, False, True),
        ("", None, False, True),
        ("```sql\n```", None, False, True),
    ],
)
def test_parse_action(reply: str, sql: str | None, submit: bool, error: bool) -> None:
    parsed = parse_action(reply)
    assert (parsed.sql, parsed.submit, parsed.error is not None) == (sql, submit, error)


# ------------------------------------------------------------------ a hostile task file (issue 29)
@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested"),  # 64 levels, before parsing
        ("ints.json", "[1, 2, 3]", "task record 0 is int, not an object"),
        ("obj.json", '{"tasks": 5}', "not a list of task records"),
        ("field.json", '[{"db": "x", "query": "q", "gold": [1]}]', "gold must be a string"),
        ("lines.jsonl", '{"db": "x", "query": "q", "gold": "g"}\n[[[[\n', "line 2"),
        ("wide.csv", "db,query,gold\nx,q," + "g" * 200_000 + "\n", "not a readable CSV"),
        ("bad.json", b"\xff\xfe".decode("latin-1"), "not utf-8 text"),
    ],
)
def test_bound_a_hostile_task_file_is_one_clear_error(
    tmp_path: Path, name: str, content: str, match: str
) -> None:
    from multiturn_envs.errors import UntrustedInputError

    path = tmp_path / name
    path.write_bytes(content.encode("latin-1" if name == "bad.json" else "utf-8"))
    with pytest.raises(UntrustedInputError, match=match):
        load_task_file(path)


def test_bound_a_task_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    from multiturn_envs.errors import UntrustedInputError

    os.mkfifo(tmp_path / "tasks.json")
    with pytest.raises(UntrustedInputError, match="FIFO"):
        load_task_file(tmp_path / "tasks.json")
