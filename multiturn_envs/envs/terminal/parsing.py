"""Turning what an LLM writes into one shell command and/or the done signal.

Accepted, in this order:

* ``<think>...</think>`` blocks are dropped;
* a reply that is only ``submit`` (any case, optional backticks, quotes or a trailing ``.``)
  ends the episode. It is the only done signal (``done`` and ``exit`` mean something to bash);
* fenced blocks (```` ```bash ````, ```` ```sh ````, ```` ```shell ````, ```` ```console ````,
  or no language): the LAST block is the command (models often show the input first and the
  command last); a ``submit`` line after the block runs the command, then submits;
* otherwise the whole reply is the command (as a terminal would take it), after dropping a
  leading prompt (``$ `` or ``# `` on every line of a ``console`` style block) and a final
  ``submit`` line.

Empty text is a parse error: a turn spent, and a message saying what to send.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_COMMAND_CHARS = 20_000

FORMAT_HINT = (
    "Reply with one shell command (raw, or in a ```bash fenced block; several lines run as one "
    "script), or with `submit` alone when the task is done."
)

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(
    r"```[ \t]*(bash|sh|shell|console|terminal|zsh|text)?[ \t]*\n(.*?)(?:\n?[ \t]*```|$(?![\s\S]))",
    re.DOTALL | re.IGNORECASE,
)
_SUBMIT = re.compile(r"^[\s`'\"*]*submit[\s`'\".!*]*$", re.IGNORECASE)
_PROMPT = re.compile(r"^[ \t]*[$#][ \t]")


@dataclass(frozen=True)
class ParsedAction:
    """``command`` to run (or ``None``), whether to ``submit`` after it, or a parse ``error``."""

    command: str | None
    submit: bool
    error: str | None = None


def _strip_prompts(text: str, console: bool) -> str:
    lines = text.split("\n")
    every = bool(lines) and all(_PROMPT.match(line) for line in lines if line.strip())
    if (console or every) and any(_PROMPT.match(line) for line in lines):
        lines = [_PROMPT.sub("", line, count=1) for line in lines if _PROMPT.match(line)]
    return "\n".join(lines)


def parse_action(action: str) -> ParsedAction:
    """Parse one reply (never raises)."""
    text = _THINK.sub("", action).strip()
    if not text:
        return ParsedAction(None, False, f"Empty reply: nothing was run. {FORMAT_HINT}")
    if _SUBMIT.match(text):
        return ParsedAction(None, True)
    blocks = list(_FENCE.finditer(text))
    if blocks:
        last = blocks[-1]
        command = _strip_prompts(last.group(2), (last.group(1) or "").lower() == "console")
        after = text[last.end() :].strip()
        submit = any(_SUBMIT.match(line) for line in after.splitlines())
    else:
        lines = text.split("\n")
        submit = len(lines) > 1 and bool(_SUBMIT.match(lines[-1]))
        if submit:
            lines = lines[:-1]
        command = _strip_prompts("\n".join(lines), False)
    command = command.strip("\n")
    if not command.strip():
        if submit:
            return ParsedAction(None, True)
        return ParsedAction(None, False, f"The code block is empty: nothing was run. {FORMAT_HINT}")
    if len(command) > MAX_COMMAND_CHARS:
        return ParsedAction(
            None,
            False,
            f"The command is longer than {MAX_COMMAND_CHARS} characters: nothing was run.",
        )
    return ParsedAction(command, submit)
