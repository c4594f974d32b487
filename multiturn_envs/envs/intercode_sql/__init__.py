"""MT/InterCode-SQL-v0: answer questions about a database by querying it, on embedded SQLite.

Its names are imported on first use (the one style of an env package,
:mod:`multiturn_envs.envs.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.envs.intercode_sql.env import InterCodeSQLEnv as InterCodeSQLEnv
    from multiturn_envs.envs.intercode_sql.tasks import SQLTask as SQLTask
    from multiturn_envs.envs.intercode_sql.tasks import load_spider_dataset as load_spider_dataset
    from multiturn_envs.envs.intercode_sql.tasks import load_task_file as load_task_file

HOMES: dict[str, str] = {
    "InterCodeSQLEnv": "env",
    "SQLTask": "tasks",
    "load_spider_dataset": "tasks",
    "load_task_file": "tasks",
}
"""Each public name -> the module it lives in."""
__all__ = ["InterCodeSQLEnv", "SQLTask", "load_spider_dataset", "load_task_file"]
__getattr__, __dir__ = lazy_exports(__name__, HOMES)
