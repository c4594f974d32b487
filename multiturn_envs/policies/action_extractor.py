"""Action extraction: what of a model's completion is sent to the env as its action.

The env parses actions itself; extraction only removes what is not meant for the env
(``<think>`` blocks, surrounding whitespace, or everything but a regex group). Junk stays junk
and the env answers it with a parse error.
"""

from __future__ import annotations

import re

__all__ = ["ActionExtractor"]


class ActionExtractor:
    """Turn a raw completion into the action sent to the env.

    Args:
        pattern: optional regex; when it matches, the action is its last match (group 1 when the
            pattern has a group). When it does not match, the whole (cleaned) text is sent, so the
            env reports the malformed action instead of the policy hiding it.
        strip_thinking: drop ``<think>...</think>`` blocks; an unclosed ``<think>`` (the budget ran
            out while thinking) leaves no action.
    """

    _THINK = re.compile(r"<think>.*?</think>", re.DOTALL)

    def __init__(self, pattern: str | None = None, strip_thinking: bool = True) -> None:
        self.pattern = re.compile(pattern, re.DOTALL) if pattern else None
        self.strip_thinking = strip_thinking

    def __call__(self, text: str) -> str:
        if self.strip_thinking:
            text = self._THINK.sub("", text)
            if "<think>" in text:
                text = text[: text.index("<think>")]
            text = text.replace("</think>", "")
        if self.pattern is not None:
            matches = list(self.pattern.finditer(text))
            if matches:
                last = matches[-1]
                text = last.group(1) if self.pattern.groups else last.group(0)
        return text.strip()
