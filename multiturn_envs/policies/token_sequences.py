"""A trajectory's exact token ids: what a record keeps per turn, and the sequences to score.

A backend's :class:`~multiturn_envs.policies.base.Reply` carries its generated ids and how its
prompt extended the previous one (:data:`TOKEN_META_KEYS`); :func:`reply_tokens` is what a
trajectory record keeps of them, :func:`replies_from_tokens` rebuilds the replies from a record,
and :func:`trajectory_sequences` turns an episode's replies into the token sequences (and
action spans) a scoring model gets, so that scoring gives back the generating log-probs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from multiturn_envs.policies.base import Reply, TurnTokens

__all__ = [
    "TOKEN_META_KEYS",
    "ScoringSequence",
    "replies_from_tokens",
    "reply_tokens",
    "trajectory_sequences",
]


@dataclass
class ScoringSequence:
    """Token ids and the ``[start, end)`` spans whose log-probs are wanted."""

    token_ids: list[int]
    spans: list[tuple[int, int]]

    def __post_init__(self) -> None:
        self.token_ids = [int(t) for t in self.token_ids]
        self.spans = [(int(a), int(b)) for a, b in self.spans]
        for a, b in self.spans:
            if not 1 <= a <= b <= len(self.token_ids):
                raise ValueError(
                    f"span {(a, b)} must satisfy 1 <= start <= end <= {len(self.token_ids)} "
                    "(the first token has no log-prob)"
                )


def trajectory_sequences(replies: Sequence[Reply]) -> list[ScoringSequence]:
    """The exact token sequences of one episode's replies, one span per reply.

    Consecutive continued turns form one sequence (score it in one request); a turn whose prompt
    was re-rendered (``prompt_continued`` false after the first) starts a new one. Each span is
    the reply's generated ids, so scoring it under the generating model gives back
    ``reply.logprobs``.
    """
    sequences: list[ScoringSequence] = []
    for reply in replies:
        if reply.token_ids is None or "prompt_delta_ids" not in reply.meta:
            raise ValueError("a reply without token ids cannot be scored exactly; use sequence_of")
        delta = [int(t) for t in reply.meta["prompt_delta_ids"]]
        if not sequences or not reply.meta.get("prompt_continued", False):
            sequences.append(ScoringSequence([], []))
        seq = sequences[-1]
        seq.token_ids.extend(delta)
        expected = reply.meta.get("prompt_len")
        if expected is not None and int(expected) != len(seq.token_ids):
            raise ValueError(
                f"reply prompt_len {expected} != {len(seq.token_ids)} rebuilt ids: the replies are "
                "not the consecutive turns of one episode"
            )
        start = len(seq.token_ids)
        seq.token_ids.extend(int(t) for t in reply.token_ids)
        seq.spans.append((start, len(seq.token_ids)))
    for seq in sequences:
        seq.__post_init__()
    return sequences


# ---------------------------------------------------------------------------------- records
TOKEN_META_KEYS = (
    "prompt_delta_ids",
    "prompt_continued",
    "prompt_len",
    "finish_reason",
    "raw_text",
)
"""The :class:`Reply` ``meta`` keys a trajectory record keeps per turn (``turn_tokens``): with
the generated ids they rebuild the exact token sequence (:func:`trajectory_sequences`)."""


def reply_tokens(reply: Reply) -> TurnTokens | None:
    """What a record keeps of ``reply``'s tokens (``None`` when the policy gave no ids).

    ``ids`` and ``logprobs`` are the generated ids and their log-probs; the other keys are
    :data:`TOKEN_META_KEYS` as far as the backend set them.
    """
    if reply.token_ids is None:
        return None
    tokens: dict[str, Any] = {
        "ids": [int(t) for t in reply.token_ids],
        "logprobs": None if reply.logprobs is None else [float(x) for x in reply.logprobs],
    }
    for key in TOKEN_META_KEYS:
        if key in reply.meta:
            tokens[key] = reply.meta[key]
    return cast(TurnTokens, tokens)


def replies_from_tokens(
    actions: Sequence[str], turn_tokens: Sequence[Mapping[str, Any] | None]
) -> list[Reply]:
    """The replies of a recorded trajectory, rebuilt from its ``actions`` and ``turn_tokens``.

    The inverse of :func:`reply_tokens`, so that ``trajectory_sequences(replies_from_tokens(...))``
    gives the exact sequences the model generated. A turn without ids is a ``ValueError``: it
    cannot be scored exactly (score its text with ``ChatPrompter.sequence_of`` instead).
    """
    if len(actions) != len(turn_tokens):
        raise ValueError(f"{len(actions)} actions but {len(turn_tokens)} turn_tokens entries")
    replies = []
    for t, (action, tokens) in enumerate(zip(actions, turn_tokens), start=1):
        if tokens is None or "ids" not in tokens:
            raise ValueError(f"turn {t} has no recorded token ids")
        logprobs = tokens.get("logprobs")
        replies.append(
            Reply(
                text=str(action),
                token_ids=[int(x) for x in tokens["ids"]],
                logprobs=None if logprobs is None else [float(x) for x in logprobs],
                meta={k: tokens[k] for k in TOKEN_META_KEYS if k in tokens},
            )
        )
    return replies
