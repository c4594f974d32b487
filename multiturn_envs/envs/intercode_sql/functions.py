"""MySQL functions SQLite lacks, registered on every connection as deterministic UDFs.

Agents trained on InterCode's MySQL write ``CONCAT(a, b)``, ``YEAR(d)``, ``MONTH(d)``,
``DAY(d)``; Python's bundled SQLite (3.40 here) has none of them (``concat`` arrived in 3.44
with different NULL handling). These follow MySQL's semantics: any NULL argument gives NULL;
the date parts read the leading ``YYYY-MM-DD`` of ISO text. Non-deterministic ones (``NOW()``)
are deliberately absent so episodes replay exactly.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

_ISO_DATE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})")


def _concat(*args: Any) -> str | None:
    if any(a is None for a in args):
        return None
    return "".join(_as_text(a) for a in args)


def _as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _date_part(index: int) -> Any:
    def part(value: Any) -> int | None:
        if value is None:
            return None
        match = _ISO_DATE.match(str(value))
        return int(match.group(index)) if match else None

    return part


def register_mysql_functions(conn: sqlite3.Connection) -> None:
    """Install the MySQL compatibility functions on ``conn``."""
    conn.create_function("concat", -1, _concat, deterministic=True)
    conn.create_function("year", 1, _date_part(1), deterministic=True)
    conn.create_function("month", 1, _date_part(2), deterministic=True)
    conn.create_function("day", 1, _date_part(3), deterministic=True)
