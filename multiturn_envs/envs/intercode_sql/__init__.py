"""MT/InterCode-SQL-v0: answer questions about a database by querying it, on embedded SQLite."""

from multiturn_envs.envs.intercode_sql.env import InterCodeSQLEnv
from multiturn_envs.envs.intercode_sql.tasks import SQLTask, load_spider_dataset, load_task_file

__all__ = ["InterCodeSQLEnv", "SQLTask", "load_spider_dataset", "load_task_file"]
