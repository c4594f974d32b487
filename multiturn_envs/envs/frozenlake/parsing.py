"""Reading one FrozenLake move out of what an LLM actually writes.

Rules, in order (the env card ``docs/envs/frozenlake.md`` has the table of examples):

1. A bare move is taken at once: ``left``/``down``/``right``/``up`` in any case, the letters
   ``L``/``D``/``R``/``U``, or the compass words ``west``/``south``/``east``/``north``, with
   surrounding whitespace and a trailing ``.`` or ``!`` ignored (the fast path: no regex).
2. Everything up to the last ``</think>`` is reasoning and is ignored (it mentions moves it
   rejects); a reply with no ``</think>`` is read whole.
3. The *final answer* is, first match wins: the last ``<answer>...</answer>`` (or the text after
   a last unclosed ``<answer>``), the last ``<action>...</action>`` (same), the last fenced
   ``` block, the last ``Action:``/``Answer:``/``Move:`` line, else the whole reply.
4. In the final answer, move words are found as whole words, case-insensitively (a bare
   letter counts only when it is the whole final answer). One distinct move: that move
   (repeats such as ``Up || Up`` are one move). Two or more different moves: ambiguous, a
   parse error (one move per turn). None: a parse error.

A parse error never raises: the env shows :data:`PARSE_HELP` and the turn is spent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from multiturn_envs.envs.fences import fold_ascii, last_fence_body
from multiturn_envs.envs.frozenlake.dynamics import ACTION_NAMES, DOWN, LEFT, RIGHT, UP

MOVE_WORDS: dict[str, int] = {
    "left": LEFT,
    "down": DOWN,
    "right": RIGHT,
    "up": UP,
    "west": LEFT,
    "south": DOWN,
    "east": RIGHT,
    "north": UP,
}
_LETTERS: dict[str, int] = {"l": LEFT, "d": DOWN, "r": RIGHT, "u": UP}
_BARE: dict[str, int] = {**MOVE_WORDS, **_LETTERS}

PARSE_HELP = (
    "Reply with exactly one move: Left, Down, Right or Up (for example <answer>Right</answer>)."
)

# The leading class takes blanks but not the newline (``[^\S\n]``): with ``\s`` there, every
# line start of a run of blank lines re-scanned the whole run (``"\n" * 40000`` took 50 s); a
# label line is matched from its own line start either way, so the matches are the same.
_LABEL_LINE = re.compile(
    r"^(?:[^\S\n]|[*_#>-])*(?:final\s+)?(?:action|answer|move)[\s*_]*[:=](.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_LABEL_WORD = re.compile(r"action|answer|move")  # searched in ASCII-folded text (fast)
_WORD = re.compile(r"\b(left|down|right|up|west|south|east|north)\b", re.IGNORECASE)
_TAGS = ("answer", "action")


@dataclass(frozen=True)
class ParsedMove:
    """The move read from a reply (``action`` 0-3), or why none could be read (``error``)."""

    action: int | None
    error: str | None = None


def _bare(text: str) -> int | None:
    return _BARE.get(text.strip().rstrip(".!").strip().lower())


def _last_tagged(text: str, lowered: str, tag: str) -> str | None:
    """Content of the last ``<tag>``: up to its ``</tag>``, or to the end when unclosed."""
    start = lowered.rfind(f"<{tag}>")
    if start < 0:
        return None
    start += len(tag) + 2
    end = lowered.find(f"</{tag}>", start)
    return text[start:] if end < 0 else text[start:end]


def final_answer(text: str) -> str:
    """The part of a reply that holds its final answer (rule 3)."""
    if "<" in text:
        lowered = fold_ascii(text)  # same length as text (``str.lower`` may change it)
        close = lowered.rfind("</think>")
        if close >= 0:
            text, lowered = text[close + 8 :], lowered[close + 8 :]
        for tag in _TAGS:
            content = _last_tagged(text, lowered, tag)
            if content is not None:
                return content
    fenced = last_fence_body(text)
    if fenced is not None:
        return fenced
    labelled = _last_label(text)
    if labelled is not None:
        return labelled
    return text


def _last_label(text: str) -> str | None:
    """``_LABEL_LINE.findall(text)[-1]`` (or ``None``), trying only the lines that hold a label
    word: the regex alone costs ~0.4 us per line start, 0.4 s on a megabyte of newlines.

    Same matches: every label line holds its word, and a match tried from that word's line
    start succeeds exactly when ``findall`` finds one there (its prefix never crosses a
    newline); lines inside an earlier match are skipped, as ``findall`` skips them.
    """
    last: str | None = None
    match_end = 0
    line_end = -1  # end of the line last tried (a later word on it is not tried again)
    for word in _LABEL_WORD.finditer(fold_ascii(text)):  # same indices as text
        position = word.start()
        if position < line_end or position < match_end:
            continue
        line_start = text.rfind("\n", match_end, position) + 1 or match_end
        found = text.find("\n", position)
        line_end = len(text) if found < 0 else found
        if line_start < match_end:
            continue
        match = _LABEL_LINE.match(text, line_start)
        if match is not None:
            last, match_end = match.group(1), match.end()
    return last


def parse_move(text: str) -> ParsedMove:
    """Read one move from ``text`` by the module's rules; never raises on a ``str``."""
    quick = _bare(text)
    if quick is not None:
        return ParsedMove(quick)
    answer = final_answer(text)
    quick = _bare(answer)
    if quick is not None:
        return ParsedMove(quick)
    found = {MOVE_WORDS[w.lower()] for w in _WORD.findall(answer)}
    if len(found) == 1:
        return ParsedMove(found.pop())
    if not found:
        return ParsedMove(None, f"Could not find a move in your reply. {PARSE_HELP}")
    names = ", ".join(ACTION_NAMES[a] for a in sorted(found))
    return ParsedMove(
        None, f"Your answer names more than one move ({names}); one move per turn. {PARSE_HELP}"
    )
