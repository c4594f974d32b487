"""MySQL functions and comparison rules SQLite lacks, installed on every connection.

Agents trained on InterCode's MySQL 8 write ``CONCAT``, ``YEAR``, ``REGEXP``, ``CURDATE()``,
``STR_TO_DATE``, ``TIMESTAMPDIFF``, ``RAND()``...; Python's bundled SQLite (3.40 here) has none
of them. They follow MySQL's semantics where it matters for results (a NULL argument gives NULL;
dates are read from ISO text; ``REGEXP`` is case-insensitive like MySQL's on ``_ci`` text).

Determinism: an episode must replay exactly, so nothing reads the real clock or a global random
state. The clock is the connection's fixed :class:`MySQLClock` (``CURDATE()``, ``NOW()``, SQLite's
``'now'`` and ``CURRENT_DATE``/``CURRENT_TIMESTAMP`` all read it), and ``RAND()`` draws from a
generator reseeded from each statement's text (:meth:`StatementRandom.reseed`), so the same query
gives the same rows every time, like MySQL's ``RAND(N)``.

Collation: MySQL's ``utf8mb4_general_ci`` is case-insensitive and PAD SPACE (``'Aberdeen '`` =
``'Aberdeen'``; Spider's flight_2 stores such values). The converted text columns are declared
``COLLATE NOCASE``, and those whose values carry trailing spaces ``COLLATE MYSQL_GENERAL_CI``
(:data:`PAD_SPACE_COLLATION`), registered here: case-, accent- and trailing-space-blind, so
``=``, ``IN``, ``GROUP BY`` and ``DISTINCT`` on them compare text as MySQL does. (It is a Python
callback, ~30x slower than the built-in ``NOCASE``; hence only on the columns that need it.)
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sqlite3
import unicodedata
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

_ISO_DATE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})")
_ISO_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
DEFAULT_CLOCK = dt.datetime(2023, 6, 1, 12, 0, 0)  # InterCode's runs: spring 2023
PAD_SPACE_COLLATION = "MYSQL_GENERAL_CI"


@dataclass
class MySQLClock:
    """The fixed "now" of a connection (MySQL's ``NOW()``; SQLite's ``'now'``)."""

    now: dt.datetime = DEFAULT_CLOCK


@dataclass
class StatementRandom:
    """``RAND()``'s source: a generator reseeded from each statement's text.

    The generator is made on the statement's first ``RAND()`` call (most statements make none).
    """

    seed: int = 0
    rng: np.random.Generator | None = field(default=None)

    def reseed(self, sql: str) -> None:
        self.seed = zlib.crc32(sql.encode("utf-8", "surrogatepass"))
        self.rng = None

    def __call__(self, seed: Any = None) -> float:
        if seed is not None:
            try:
                return float(np.random.default_rng(int(seed) & 0xFFFFFFFF).random())
            except (TypeError, ValueError):
                return float(np.random.default_rng(0).random())
        if self.rng is None:
            self.rng = np.random.default_rng(self.seed)
        return float(self.rng.random())


def mysql_text_key(value: str) -> str:
    """The comparison key of ``utf8mb4_general_ci``: trailing spaces, case and accents ignored."""
    stripped = value.rstrip(" ")
    if stripped.isascii():
        return stripped.lower()
    decomposed = unicodedata.normalize("NFD", stripped)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _general_ci(a: str, b: str) -> int:
    ka, kb = mysql_text_key(a), mysql_text_key(b)
    return (ka > kb) - (ka < kb)


def _concat(*args: Any) -> str | None:
    if any(a is None for a in args):
        return None
    return "".join(_as_text(a) for a in args)


def _concat_ws(sep: Any, *args: Any) -> str | None:
    if sep is None:
        return None
    return _as_text(sep).join(_as_text(a) for a in args if a is not None)


def _as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(value)
    return str(value)


def parse_datetime(value: Any) -> dt.datetime | None:
    """MySQL's reading of a date/datetime value from ISO text or a number (``None``: invalid)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value
    text = str(value).strip()
    match = _ISO_DATE.match(text)
    if match is None:
        if re.fullmatch(r"\d{8}", text):
            text = f"{text[:4]}-{text[4:6]}-{text[6:]}"
            match = _ISO_DATE.match(text)
        if match is None:
            return None
    year, month, day = (int(g) for g in match.groups())
    hour = minute = second = 0
    rest = text[match.end() :]
    time_match = _ISO_TIME.search(rest)
    if time_match is not None:
        hour, minute = int(time_match.group(1)), int(time_match.group(2))
        second = int(time_match.group(3) or 0)
    try:
        return dt.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None


def _date_part(index: int) -> Callable[[Any], int | None]:
    def part(value: Any) -> int | None:
        if value is None:
            return None
        match = _ISO_DATE.match(str(value))
        return int(match.group(index)) if match else None

    return part


def _time_part(attr: str) -> Callable[[Any], int | None]:
    def part(value: Any) -> int | None:
        moment = parse_datetime(value)
        if moment is None and value is not None:  # a time without a date: 'hh:mm[:ss]'
            match = _ISO_TIME.fullmatch(str(value).strip())
            if match is None:
                return None
            hms = {"hour": match.group(1), "minute": match.group(2), "second": match.group(3)}
            return int(hms[attr] or 0)
        return None if moment is None else int(getattr(moment, attr))

    return part


_MYSQL_FORMAT = {
    "%Y": "%Y",
    "%y": "%y",
    "%m": "%m",
    "%d": "%d",
    "%H": "%H",
    "%h": "%I",
    "%I": "%I",
    "%i": "%M",
    "%s": "%S",
    "%S": "%S",
    "%p": "%p",
    "%M": "%B",
    "%b": "%b",
    "%W": "%A",
    "%a": "%a",
    "%j": "%j",
    "%T": "%H:%M:%S",
    "%f": "%f",
    "%%": "%%",
}


def _python_format(mysql_format: str) -> str:
    out = []
    i = 0
    while i < len(mysql_format):
        pair = mysql_format[i : i + 2]
        if pair in _MYSQL_FORMAT:
            out.append(_MYSQL_FORMAT[pair])
            i += 2
        elif pair in ("%c", "%e", "%k", "%l"):
            out.append("{" + pair[1] + "}")  # unpadded: filled in after strftime
            i += 2
        else:
            out.append(mysql_format[i].replace("{", "{{").replace("}", "}}"))
            i += 1
    return "".join(out)


MAX_FORMAT_CHARS = 256
"""Characters of a DATE_FORMAT/STR_TO_DATE format (longer ones give NULL)."""


def _date_format(value: Any, fmt: Any) -> str | None:
    moment = parse_datetime(value)
    if moment is None or fmt is None or len(str(fmt)) > MAX_FORMAT_CHARS:
        return None
    text = moment.strftime(_python_format(str(fmt)))
    return text.format(c=moment.month, e=moment.day, k=moment.hour, l=(moment.hour % 12) or 12)


def _str_to_date(value: Any, fmt: Any) -> str | None:
    if value is None or fmt is None or len(str(fmt)) > MAX_FORMAT_CHARS:
        return None
    pattern = _python_format(str(fmt)).format(c="%m", e="%d", k="%H", l="%I")
    try:
        moment = dt.datetime.strptime(str(value).strip(), pattern)
    except (ValueError, re.error):  # re.error: a directive given twice
        return None
    has_time = any(tok in str(fmt) for tok in ("%H", "%h", "%i", "%s", "%S", "%T", "%k", "%l"))
    return moment.isoformat(sep=" ") if has_time else moment.date().isoformat()


def _from_unixtime(value: Any, fmt: Any = None) -> str | None:
    if value is None:
        return None
    try:
        moment = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    text = moment.replace(microsecond=0).isoformat(sep=" ")
    return text if fmt is None else _date_format(text, fmt)


def _unix_timestamp(clock: MySQLClock) -> Callable[..., int | None]:
    def unix_timestamp(value: Any = None) -> int | None:
        moment = clock.now if value is None else parse_datetime(value)
        if moment is None:
            return None
        return int((moment - dt.datetime(1970, 1, 1)).total_seconds())

    return unix_timestamp


_UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 604800}


def _timestampdiff(unit: Any, start: Any, end: Any) -> int | None:
    a, b = parse_datetime(start), parse_datetime(end)
    if a is None or b is None or unit is None:
        return None
    name = str(unit).upper()
    if name in _UNIT_SECONDS:
        return int((b - a).total_seconds() / _UNIT_SECONDS[name])
    months = (b.year - a.year) * 12 + (b.month - a.month)
    if months > 0 and (b.day, b.time()) < (a.day, a.time()):
        months -= 1
    elif months < 0 and (b.day, b.time()) > (a.day, a.time()):
        months += 1
    if name == "MONTH":
        return months
    if name == "QUARTER":
        return int(months / 3)
    if name == "YEAR":
        return int(months / 12)
    return None


def _datediff(end: Any, start: Any) -> int | None:
    a, b = parse_datetime(end), parse_datetime(start)
    if a is None or b is None:
        return None
    return (a.date() - b.date()).days


MAX_REGEXP_PATTERN = 1_000
"""Characters of a ``REGEXP`` pattern (MySQL's patterns in InterCode's runs are a few dozen)."""


class Regexp:
    """MySQL's ``REGEXP``/``RLIKE`` (SQLite calls ``regexp(pattern, text)``), matched by RE2.

    Python's ``re`` backtracks: ``'aaaa...b' REGEXP '(a+)+$'`` runs for hours inside one SQLite
    VM instruction, where neither the progress handler nor the wall clock can stop it. RE2
    (``google-re2``) matches in time linear in the text, so a REGEXP costs at most one pass over
    a value (itself at most ``QueryLimits.max_value_bytes``). RE2 has no backreferences or
    lookaround; a pattern it rejects (or one longer than :data:`MAX_REGEXP_PATTERN`) is an error
    with RE2's reason, as MySQL errors on a pattern its engine rejects. Matching is
    case-insensitive, as MySQL's on ``_ci`` text; a NULL argument gives NULL.

    ``error`` holds the message of the last failure (SQLite reports only "user-defined function
    raised exception"); the connection clears it before each statement.
    """

    def __init__(self) -> None:
        self.error: str | None = None
        self._compiled: dict[str, Any] = {}

    def __call__(self, pattern: Any, value: Any) -> int | None:
        if pattern is None or value is None:
            return None
        return int(self._compile(_as_text(pattern)).search(_as_text(value)) is not None)

    def _compile(self, pattern: str) -> Any:
        compiled = self._compiled.get(pattern)
        if compiled is not None:
            return compiled
        if len(pattern) > MAX_REGEXP_PATTERN:
            self._fail(f"REGEXP patterns are limited to {MAX_REGEXP_PATTERN:,} characters here")
        try:
            import re2
        except ImportError:
            self._fail("REGEXP needs the google-re2 package: pip install 'multiturn-envs[sql]'")
        options = re2.Options()
        options.case_sensitive = False
        options.log_errors = False
        try:
            compiled = re2.compile(pattern, options)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            self._fail(
                f"Illegal argument to a regular expression: {reason} (REGEXP here is matched "
                "by RE2, in linear time: no backreferences or lookaround)"
            )
        if len(self._compiled) >= 64:
            self._compiled.clear()
        self._compiled[pattern] = compiled
        return compiled

    def _fail(self, message: str) -> NoReturn:
        self.error = message
        raise ValueError(message)


def _left(value: Any, n: Any) -> str | None:
    if value is None or n is None:
        return None
    return _as_text(value)[: max(0, int(n))]


def _right(value: Any, n: Any) -> str | None:
    if value is None or n is None:
        return None
    count = max(0, int(n))
    return _as_text(value)[-count:] if count else ""


def _if(condition: Any, then: Any, otherwise: Any) -> Any:
    truthy = condition is not None and condition != 0 and condition != ""
    return then if truthy else otherwise


def _truncate(value: Any, digits: Any) -> float | int | None:
    if value is None or digits is None:
        return None
    places = max(-308, min(int(digits), 308))  # a double has no digits past these
    factor = 10**places  # (10 ** 1e9 would never finish)
    try:
        result = math.trunc(float(value) * factor) / factor
    except OverflowError:  # value * factor is infinite: nothing to cut at that precision
        result = float(value)
    return int(result) if places <= 0 else result


def _text_fn(fn: Callable[[str], Any]) -> Callable[[Any], Any]:
    def apply(value: Any) -> Any:
        return None if value is None else fn(_as_text(value))

    return apply


MYSQL_FUNCTION_NAMES: frozenset[str] = frozenset(
    {
        "concat", "concat_ws", "year", "month", "day", "dayofmonth", "hour", "minute", "second",
        "date_format", "str_to_date", "from_unixtime", "timestampdiff", "datediff", "regexp",
        "mysql_left", "mysql_right", "if", "truncate", "lcase", "ucase", "char_length",
        "curdate", "current_date", "curtime", "now", "sysdate", "localtime", "unix_timestamp",
        "rand",
    }
)  # fmt: skip
"""The functions :func:`register_mysql_functions` installs (the sandbox allows them)."""


def register_mysql_functions(
    conn: sqlite3.Connection,
    clock: MySQLClock | None = None,
    rand: StatementRandom | None = None,
    regexp: Regexp | None = None,
) -> None:
    """Install the MySQL compatibility functions and collation on ``conn``."""
    clock = clock or MySQLClock()
    rand = rand or StatementRandom()
    regexp = regexp or Regexp()
    conn.create_collation(PAD_SPACE_COLLATION, _general_ci)
    deterministic: dict[str, tuple[int, Callable[..., Any]]] = {
        "concat": (-1, _concat),
        "concat_ws": (-1, _concat_ws),
        "year": (1, _date_part(1)),
        "month": (1, _date_part(2)),
        "day": (1, _date_part(3)),
        "dayofmonth": (1, _date_part(3)),
        "hour": (1, _time_part("hour")),
        "minute": (1, _time_part("minute")),
        "second": (1, _time_part("second")),
        "date_format": (2, _date_format),
        "str_to_date": (2, _str_to_date),
        "from_unixtime": (-1, _from_unixtime),
        "timestampdiff": (3, _timestampdiff),
        "datediff": (2, _datediff),
        "regexp": (2, regexp),
        "mysql_left": (2, _left),
        "mysql_right": (2, _right),
        "if": (3, _if),
        "truncate": (2, _truncate),
        "lcase": (1, _text_fn(str.lower)),
        "ucase": (1, _text_fn(str.upper)),
        "char_length": (1, _text_fn(len)),
    }
    for name, (n_args, fn) in deterministic.items():
        conn.create_function(name, n_args, fn, deterministic=True)
    conn.create_function("from_unixtime", 1, _from_unixtime, deterministic=True)
    conn.create_function("from_unixtime", 2, _from_unixtime, deterministic=True)
    # fixed per connection (the clock) or per statement (RAND): not "deterministic" to SQLite
    conn.create_function("curdate", 0, lambda: clock.now.date().isoformat())
    conn.create_function("current_date", 0, lambda: clock.now.date().isoformat())
    conn.create_function("curtime", 0, lambda: clock.now.time().isoformat())
    conn.create_function("now", 0, lambda: clock.now.isoformat(sep=" "))
    conn.create_function("sysdate", 0, lambda: clock.now.isoformat(sep=" "))
    conn.create_function("localtime", 0, lambda: clock.now.isoformat(sep=" "))
    conn.create_function("unix_timestamp", -1, _unix_timestamp(clock))
    conn.create_function("rand", 0, rand)
    conn.create_function("rand", 1, rand)


_STRING = re.compile(r"('(?:[^']|'')*')")
_CLOCK_KEYWORDS = re.compile(r"\b(CURRENT_TIMESTAMP|CURRENT_DATE|CURRENT_TIME)\b(?!\s*\()", re.I)
_KEYWORD_CALLS = {
    "CURRENT_TIMESTAMP": "now()",
    "CURRENT_DATE": "curdate()",
    "CURRENT_TIME": "curtime()",
}
_SIDE_FUNCTIONS = re.compile(r"\b(left|right)\s*\(", re.IGNORECASE)
_UNIT_ARGUMENT = re.compile(
    r"\b(timestampdiff)\s*\(\s*(microsecond|second|minute|hour|day|week|month|quarter|year)\s*,",
    re.IGNORECASE,
)
_NOW_CONTEXT = re.compile(
    r"(?:\b(?:date|time|datetime|julianday|unixepoch|strftime)\s*\(|,)\s*$", re.IGNORECASE
)


def mysql_surface(sql: str, clock: MySQLClock) -> str:
    """``sql`` with MySQL spellings SQLite cannot parse made callable, and SQLite's own clock
    readings pinned to the connection's fixed clock.

    Outside string literals: ``CURRENT_DATE``/``CURRENT_TIME``/``CURRENT_TIMESTAMP`` become
    ``curdate()``/``curtime()``/``now()``; ``LEFT(``/``RIGHT(`` (keywords to SQLite) call
    ``mysql_left``/``mysql_right``; ``TIMESTAMPDIFF(YEAR, ...)``'s bare unit becomes a string.
    The literal ``'now'`` as an argument of SQLite's date functions reads the fixed clock.
    """
    lowered = sql.lower()
    if not any(k in lowered for k in ("now", "current_", "left", "right", "timestampdiff")):
        return sql
    fixed = "'" + clock.now.isoformat(sep=" ") + "'"
    parts = _STRING.split(sql)
    out: list[str] = []
    for i, part in enumerate(parts):
        if i % 2:  # a string literal
            before = out[-1] if out else ""
            out.append(fixed if part.lower() == "'now'" and _NOW_CONTEXT.search(before) else part)
            continue
        part = _CLOCK_KEYWORDS.sub(lambda m: _KEYWORD_CALLS[m.group(1).upper()], part)
        part = _SIDE_FUNCTIONS.sub(lambda m: f"mysql_{m.group(1).lower()}(", part)
        part = _UNIT_ARGUMENT.sub(lambda m: f"{m.group(1)}('{m.group(2)}',", part)
        out.append(part)
    return "".join(out)
