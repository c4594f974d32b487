"""Reading an agent's reply: the SQL to run and whether it submits.

Accepted forms (InterCode's prompts ask for a fenced ```` ```sql ```` block; raw SQL is common):

* a fenced block (the first one tagged ``sql``, else the first fenced block);
* raw text, taken as SQL;
* ``submit`` alone: submit the last query's result;
* SQL plus ``submit`` on its own first or last line (or after the fenced block): run the query,
  then submit its result.

Prose with no SQL is a parse error (the reply costs a turn and the agent is told the forms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from multiturn_envs.envs.fences import FENCE, pairs, remove_pairs

# What follows an opening fence: the block's tag (```` ```sql ````) and the line end. Matched at
# one position with greedy classes that never backtrack (blocks: :mod:`..fences`, linear time).
_FENCE_HEAD = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?")
SQL_TAGS: frozenset[str] = frozenset({"sql", "mysql", "sqlite"})
_SQL_TAG = re.compile(r"```[ \t]*(?:sql|mysql|sqlite)(?![A-Za-z0-9_+-])", re.IGNORECASE)
_FIRST_WORD = re.compile(r"[A-Za-z]+")
_SUBMIT = re.compile(r"^\W*submit\W*$", re.I)
SQL_KEYWORDS: frozenset[str] = frozenset(
    {
        "select", "with", "values", "show", "desc", "describe", "explain", "use", "pragma",
        "insert", "update", "delete", "replace", "create", "drop", "alter", "attach", "detach",
        "vacuum", "begin", "commit", "end", "rollback", "savepoint", "release", "analyze",
        "reindex", "table",
    }
)  # fmt: skip
FORMAT_HINT = (
    "Reply with one SQL query (raw, or in a ```sql fenced block), or with `submit` to submit the "
    "last result as your answer."
)


@dataclass(frozen=True)
class ParsedAction:
    """``sql`` to run (``None``: none), ``submit`` requested, ``error`` when unreadable."""

    sql: str | None
    submit: bool
    error: str | None = None


def _strip_submit_lines(text: str) -> tuple[str, bool]:
    lines = text.strip().splitlines()
    submit = False
    while lines and _SUBMIT.match(lines[-1]):
        lines.pop()
        submit = True
    while lines and _SUBMIT.match(lines[0]):
        lines.pop(0)
        submit = True
    return "\n".join(lines).strip(), submit


def looks_like_sql(text: str) -> bool:
    """Whether ``text`` starts (after blanks and opening parentheses) with an SQL keyword."""
    word = _FIRST_WORD.match(text.lstrip().lstrip("(").lstrip())
    return word is not None and word.group(0).lower() in SQL_KEYWORDS


def chosen_block(text: str) -> str | None:
    """The body of the first fenced block tagged ``sql``/``mysql``/``sqlite``, else of the
    first block (``None`` without a block): what ``re.findall`` of
    ```` ```[ \\t]*([A-Za-z0-9_+-]*)[ \\t]*\\n?(.*?)``` ```` and a pick among the matches gave,
    in linear time, and scanning past the first block only when a tag can follow."""
    first: str | None = None
    tag_ahead = _SQL_TAG.search(text) is not None
    for span in pairs(text, FENCE, FENCE):
        head = _FENCE_HEAD.match(text, span.body, span.close)
        assert head is not None  # every part of the head is optional
        body = text[head.end() : span.close]
        if head.group(1).lower() in SQL_TAGS:
            return body
        if first is None:
            first = body
        if not tag_ahead:
            break
    return first


def parse_action(text: str) -> ParsedAction:
    """Parse one reply; never raises."""
    if not text or not text.strip():
        return ParsedAction(None, False, f"The reply is empty. {FORMAT_HINT}")
    body = chosen_block(text)
    submit = False
    if body is not None:
        outside = remove_pairs(text, FENCE, FENCE, "\n")
        sql, submit_in = _strip_submit_lines(body)
        submit = submit_in or any(_SUBMIT.match(ln) for ln in outside.splitlines())
    else:
        sql, submit = _strip_submit_lines(text)
    sql = sql.strip()
    if not sql:
        if submit:
            return ParsedAction(None, True)
        return ParsedAction(None, False, f"The fenced block is empty. {FORMAT_HINT}")
    if not looks_like_sql(sql):
        return ParsedAction(None, False, f"No SQL statement found in the reply. {FORMAT_HINT}")
    return ParsedAction(sql, submit)
