"""Code fences and tag pairs in agent replies, found in linear time.

Why this module exists: the envs used to find fenced blocks with regular expressions such as
```` ```(.*?)``` ````. Python's ``re`` backtracks, so on replies a degenerate policy writes (an
opening fence followed by 40,000 blanks, thousands of unclosed ``<think>`` tags) those patterns
took quadratic or cubic time: one reply could stall a step for minutes. The scanners here use
only ``str.find`` and give exactly the matches of the regular expressions they replace (the
leftmost-first, non-overlapping matches of "an opening marker, the shortest body, a closing
marker"), so every env reads replies as before, in time linear in the reply.

Rule they share: a match opens at the first opening marker at or after the previous match's
end and closes at the first closing marker after the opening; when an opening has no closing
marker after it, no later opening has one either, so the scan stops (the regex would try every
later position in vain, which is where its time went).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

FENCE = "```"


class Span(NamedTuple):
    """One matched pair: ``text[start:end]`` is the whole match, ``text[body:close]`` its body.

    ``start`` is where the opening marker begins, ``body`` where the text after it begins,
    ``close`` where the closing marker begins and ``end`` where it ends.
    """

    start: int
    body: int
    close: int
    end: int


def pairs(text: str, opening: str, closing: str) -> Iterator[Span]:
    """The successive non-overlapping ``opening ... closing`` matches of ``text`` (case as given).

    Equivalent to ``re.finditer(re.escape(opening) + "(.*?)" + re.escape(closing), text, re.S)``.
    """
    position = 0
    while True:
        start = text.find(opening, position)
        if start < 0:
            return
        body = start + len(opening)
        close = text.find(closing, body)
        if close < 0:
            return
        end = close + len(closing)
        yield Span(start, body, close, end)
        position = end


def fences(text: str) -> list[Span]:
    """Every fenced block of ``text``: `````` ```...``` `````` pairs (``re.findall`` order).

    Fences pair up as consecutive non-overlapping occurrences of `````` ``` ``````, which is
    what ``str.split`` cuts at, so the blocks are the odd pieces but the last (C speed: a
    megabyte of backticks in milliseconds).
    """
    if FENCE not in text:
        return []
    pieces = text.split(FENCE)
    spans: list[Span] = []
    position = len(pieces[0])
    width = len(FENCE)
    for index in range(1, len(pieces) - 1, 2):
        body = position + width
        close = body + len(pieces[index])
        spans.append(Span(position, body, close, close + width))
        position = close + width + len(pieces[index + 1])
    return spans


def last_fence_body(text: str) -> str | None:
    """The body of the last complete fenced block of ``text`` (``None`` without one)."""
    if FENCE not in text:
        return None
    pieces = text.split(FENCE)
    last = len(pieces) - 2  # the last piece that has a fence after it
    if last < 1:
        return None
    return pieces[last if last % 2 else last - 1]


def first_pair_casefold(text: str, opening: str, closing: str) -> Span | None:
    """The first ``opening ... closing`` match of ``text``, markers matched case-insensitively.

    For ASCII markers (``<TOOLCALL>``); equivalent to ``re.search(..., re.S | re.I)``. The
    text is not lower-cased as a whole (that can change its length, and so its indices);
    only ASCII letters are folded.
    """
    folded = fold_ascii(text)
    start = folded.find(opening.lower())
    if start < 0:
        return None
    body = start + len(opening)
    close = folded.find(closing.lower(), body)
    if close < 0:
        return None
    return Span(start, body, close, close + len(closing))


def remove_pairs(text: str, opening: str, closing: str, replacement: str = "") -> str:
    """``text`` with every ``opening ... closing`` match replaced (``re.sub`` of the pair)."""
    if opening == closing:  # fences: the pairs are split()'s odd pieces but the last
        pieces = text.split(opening)
        complete = (len(pieces) - 1) // 2
        kept = replacement.join(pieces[0 : 2 * complete + 1 : 2])
        return kept + opening + pieces[-1] if len(pieces) % 2 == 0 else kept
    out: list[str] = []
    position = 0
    for span in pairs(text, opening, closing):
        out.append(text[position : span.start])
        out.append(replacement)
        position = span.end
    out.append(text[position:])
    return "".join(out)


_ASCII_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold_ascii(text: str) -> str:
    """``text`` with ASCII letters lower-cased and nothing else changed (same length, so its
    indices are ``text``'s; ``str.lower`` turns ``"İ"`` into two characters)."""
    if text.isascii():  # the common case, and str.lower is much faster than translate
        return text.lower()
    return text.translate(_ASCII_UPPER)
