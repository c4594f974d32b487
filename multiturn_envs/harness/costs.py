"""What a run cost: its tokens from the records, and money from a price table the user gives.

Records carry each turn's prompt and completion tokens (schema 2; :class:`~multiturn_envs.
policies.base.TokenUsage`). :func:`run_tokens` sums them per episode; with a
:class:`PriceTable` (read by :func:`load_price_table` through :mod:`multiturn_envs.untrusted`,
every field checked) :func:`format_costs` says what the run cost in all, per episode and per
success, the line ``multiturn-envs report --prices FILE`` prints under each Pass@(K,T) table.

A price table is a JSON (or TOML, or YAML) file::

    {
      "currency": "USD",
      "per_tokens": 1000000,
      "models": {
        "openai:http://127.0.0.1:8000,model=qwen": {"prompt": 0.15, "completion": 0.60},
        "*": {"prompt": 0.10, "completion": 0.40}
      }
    }

``models`` maps the policy as the records name it (the run's ``policy``) to the price of
``per_tokens`` prompt and completion tokens; ``"*"`` prices any other policy. A run whose
policy has no price gets tokens only, and the report says so. Scripted baselines report 0
tokens, so they cost 0 at any price.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from multiturn_envs.errors import UntrustedInputError
from multiturn_envs.untrusted import Fields, load_json, load_toml, load_yaml

__all__ = ["Price", "PriceTable", "RunTokens", "format_costs", "load_price_table", "run_tokens"]

MAX_PRICE_FILE_BYTES = 1 << 20
"""A price table is small: a file over 1 MiB is refused unread."""
MAX_MODELS = 10_000
MAX_PRICE = 1e9
"""The highest price a table may give per ``per_tokens`` tokens (a typo's guard)."""
_KEYS = ("currency", "per_tokens", "models")


@dataclass(frozen=True)
class Price:
    """The price of ``per_tokens`` prompt tokens and of as many completion tokens."""

    prompt: float
    completion: float


@dataclass(frozen=True)
class PriceTable:
    """Prices per policy (``"*"``: any other), in ``currency`` per ``per_tokens`` tokens."""

    models: Mapping[str, Price]
    currency: str = "USD"
    per_tokens: int = 1_000_000
    source: str = ""

    def price_of(self, policy: str) -> Price | None:
        """The price of ``policy`` (its own, else ``"*"``), or ``None``."""
        return self.models.get(policy, self.models.get("*"))

    def cost(self, policy: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        price = self.price_of(policy)
        if price is None:
            return None
        return (prompt_tokens * price.prompt + completion_tokens * price.completion) / float(
            self.per_tokens
        )


def load_price_table(path: str | os.PathLike[str]) -> PriceTable:
    """A price table from a file the user names (JSON, ``.toml`` or ``.yaml``/``.yml``), read
    within bounds; a field of the wrong type or out of range, an unknown key or a file that is
    no table is an :class:`~multiturn_envs.errors.UntrustedInputError` naming file and field."""
    where = os.fspath(path)
    suffix = os.path.splitext(where)[1].lower()
    if suffix == ".toml":
        data: Any = load_toml(path, max_bytes=MAX_PRICE_FILE_BYTES)
    elif suffix in (".yaml", ".yml"):
        data = load_yaml(path, max_bytes=MAX_PRICE_FILE_BYTES)
    else:
        data = load_json(path, max_bytes=MAX_PRICE_FILE_BYTES)
    fields = Fields(data, where=where)
    unknown = sorted(str(k) for k in fields if k not in _KEYS)
    if unknown:
        raise UntrustedInputError(
            f"{where}: unknown key(s) {unknown[:3]}; a price table has {', '.join(_KEYS)}"
        )
    currency = fields.text("currency", default="USD", max_chars=16)
    per_tokens = fields.integer("per_tokens", default=1_000_000, minimum=1, maximum=10**12)
    table = fields.table("models")
    if len(table.data) > MAX_MODELS:
        raise UntrustedInputError(f"{where}: models has over {MAX_MODELS:,} entries")
    if not table.data:
        raise UntrustedInputError(f"{where}: models is empty (map a policy, or '*', to prices)")
    models: dict[str, Price] = {}
    for name in table:
        if len(name) > 10_000:
            raise UntrustedInputError(f"{where}: models has a name over 10,000 characters")
        entry = table.table(name)
        extra = sorted(str(k) for k in entry if k not in ("prompt", "completion"))
        if extra:
            raise UntrustedInputError(
                f"{where}: models.{name} has unknown key(s) {extra[:3]}; give prompt and completion"
            )
        prices = []
        for key in ("prompt", "completion"):
            value = entry.number(key, default=None, minimum=0.0, maximum=MAX_PRICE)
            if value is None:
                raise UntrustedInputError(f"{where}: models.{name}.{key} is missing")
            prices.append(value)
        models[name] = Price(prices[0], prices[1])
    assert per_tokens is not None
    return PriceTable(models, currency, int(per_tokens), where)


@dataclass(frozen=True)
class RunTokens:
    """The tokens of a run's episodes.

    Attributes:
        episodes: episodes in the run.
        counted: episodes whose every turn has its counts (the sums are over these).
        successes: successful episodes among the counted ones.
        prompt, completion: tokens summed over the counted episodes.
    """

    policy: str
    episodes: int
    counted: int
    successes: int
    prompt: int
    completion: int

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def _counts(values: Any, turns: int) -> list[int] | None:
    if not isinstance(values, list) or len(values) != turns:
        return None
    if not all(type(v) is int for v in values):  # null turns: the episode is not counted
        return None
    return [int(v) for v in values]


def episode_tokens(record: Mapping[str, Any]) -> tuple[int, int] | None:
    """An episode's prompt and completion tokens: its turns' and those of the reply that
    stopped it without a tool call (``stop_tokens``: paid for, but no turn); ``None`` when a
    turn lacks its counts (records of schema 1, a backend that cannot tell)."""
    turns = len(record.get("actions") or [])
    stop = _counts(record.get("stop_tokens"), 2) or [0, 0]
    if turns == 0:  # stopped at its first reply: only that reply was paid for
        return (stop[0], stop[1]) if record.get("stop_tokens") is not None else None
    p = _counts(record.get("prompt_tokens"), turns)
    c = _counts(record.get("completion_tokens"), turns)
    if p is None or c is None:
        return None
    return sum(p) + stop[0], sum(c) + stop[1]


def run_tokens(policy: str, records: Sequence[Mapping[str, Any]]) -> RunTokens:
    """The token sums of ``records`` (an episode counts when every turn has its counts)."""
    counted = successes = prompt = completion = 0
    for record in records:
        tokens = episode_tokens(record)
        if tokens is None:
            continue
        counted += 1
        successes += bool(record.get("success"))
        prompt += tokens[0]
        completion += tokens[1]
    return RunTokens(policy, len(records), counted, successes, prompt, completion)


def _money(value: float) -> str:
    return f"{value:.4g}"


def format_costs(tokens: RunTokens, prices: PriceTable | None) -> str:
    """The report's lines on tokens and, with ``prices``, cost per episode and per success."""
    if tokens.counted == 0:
        return (
            "Tokens: the policy reported none (records of schema 1, or a backend that cannot tell)"
        )
    n = tokens.counted
    part = "" if n == tokens.episodes else f" (of {tokens.episodes}; the others lack counts)"
    lines = [
        f"Tokens over {n} episodes{part}: {tokens.prompt:,} prompt + {tokens.completion:,} "
        f"completion; per episode {tokens.prompt / n:,.1f} + {tokens.completion / n:,.1f}"
    ]
    if prices is None:
        return lines[0]
    price = prices.price_of(tokens.policy)
    if price is None:
        lines.append(f"Cost: {prices.source} has no price for {tokens.policy!r} (nor '*')")
        return "\n".join(lines)
    total = prices.cost(tokens.policy, tokens.prompt, tokens.completion) or 0.0
    per_success = (
        f"{_money(total / tokens.successes)} per success ({tokens.successes} successes)"
        if tokens.successes
        else "no success to divide by"
    )
    lines.append(
        f"Cost in {prices.currency} (per {prices.per_tokens:,} tokens: prompt {price.prompt:g}, "
        f"completion {price.completion:g}): {_money(total)} in all, {_money(total / n)} per "
        f"episode, {per_success}"
    )
    return "\n".join(lines)
