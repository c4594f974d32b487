"""Replay: the one way to rebuild an episode from its trajectory record.

A record holds everything that determines its episode: the env (the run's ``env_id`` and
kwargs, given here as a factory), the budget (``max_turns``, ``budget_mode``), the error
injection (``error_injection.after_expert_steps``), the reset seed and task, and the actions.
:func:`budget_stack` puts the same wrappers on an env as the runner did (the runner builds its
stacks with it too), and :class:`Replay` resets and steps them, checking at every step that
the replay reproduces the record. Every analysis that needs a past state or conversation
(same-state comparison, action NLL, cumulative LLR) goes through here, so they all accept and
refuse the same records.

The checks (``check=True``, the default), each a :class:`~multiturn_envs.errors.ReplayError`
naming the record and turn:

* the record has ``task_id`` and ``actions``;
* the injected prefix (``error_injection.injected_actions``) is the recorded one;
* every replayed reward equals the recorded reward (bit for bit: both are the env's floats);
* the episode does not end before the record's last action;
* the env's conversation holds the recorded actions as its last assistant turns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from multiturn_envs.core import TextEnv
from multiturn_envs.errors import ReplayError
from multiturn_envs.wrappers import ErrorInjection, TurnBudget, text_env_of

EnvFactory = Callable[[], gym.Env[str, str]]
"""Builds one fresh env instance (``gym.make`` of the run's env id and kwargs)."""

StackKey = tuple[int | None, str, int | None]
"""(max_turns, budget_mode, error_after): what distinguishes two wrapper stacks."""

__all__ = ["EnvFactory", "EpisodeReplay", "Replay", "StackKey", "budget_stack", "stack_key"]


def _injector(env: gym.Env[Any, Any]) -> ErrorInjection | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, ErrorInjection):
            return env
        env = env.env
    return None


def budget_stack(
    raw: gym.Env[str, str],
    max_turns: int | None,
    budget_mode: str = "hidden",
    error_after: int | None = None,
) -> gym.Env[str, str]:
    """``raw`` wrapped as the runner runs an episode: ``TurnBudget`` (when ``max_turns`` is
    set), then ``ErrorInjection(after_expert_steps=error_after)`` unless ``raw`` already
    injects errors itself.

    Precedence (docs/wrappers.md): the run's budget is the outermost ``TurnBudget``, so it wins
    over any budget ``raw``'s own wrappers or constructor name, and the record's ``max_turns``
    is the budget the episode ran with. A stack injects errors once: when ``raw`` has its own
    ``ErrorInjection``, a run's ``error_after`` must equal its ``after_expert_steps`` (the
    record says what was played), else a ``ValueError``; with ``error_after=None`` it is left
    as it is. Building the stack changes nothing in ``raw``.
    """
    env: gym.Env[str, str] = raw
    if max_turns is not None:
        env = TurnBudget(env, int(max_turns), budget_mode)
    if error_after is not None:
        own = _injector(raw)
        if own is None:
            env = ErrorInjection(env, after_expert_steps=int(error_after))
        elif own.k_range != (int(error_after), int(error_after)):
            raise ValueError(
                f"the env injects errors itself (after_expert_steps={own.k_range}) and the run "
                f"asks for error_after={error_after}: a stack injects once, so name one"
            )
    return env


def stack_key(record: Mapping[str, Any]) -> StackKey:
    """The wrapper stack a record was made under."""
    injection = record.get("error_injection") or None
    max_turns = record.get("max_turns")
    return (
        None if max_turns is None else int(max_turns),
        str(record.get("budget_mode") or "hidden"),
        None if injection is None else int(injection["after_expert_steps"]),
    )


@dataclass
class EpisodeReplay:
    """One record being replayed; :meth:`turns` steps it.

    Attributes:
        number: the record's position in what was replayed (error messages name it).
        record: the record.
        env: the wrapper stack (reset, not yet stepped).
        base: the unwrapped :class:`TextEnv` (oracle hooks, ``get_state``, messages).
        reset_info: what ``reset`` returned as info.
        played: actions replayed so far.
    """

    number: int
    record: Mapping[str, Any]
    env: gym.Env[str, str]
    base: TextEnv
    reset_info: dict[str, Any]
    check: bool = True
    played: int = 0
    _finished: bool = field(default=False, repr=False)

    @property
    def task_id(self) -> str:
        return str(self.record["task_id"])

    @property
    def actions(self) -> list[str]:
        return [str(a) for a in self.record["actions"]]

    def _where(self) -> str:
        return f"record {self.number} ({self.task_id})"

    def turns(self, upto: int | None = None) -> Iterator[int]:
        """Yield ``t`` with the env in the state before action ``t`` (0-based), then play it.

        Stops after action ``upto`` (default: the last). The consumer reads the state
        (``base.get_state()``, ``base.system_prompt()``...) at each yield and must not step
        the env itself.
        """
        actions = self.actions
        last = len(actions) - 1 if upto is None else min(upto, len(actions) - 1)
        rewards = self.record.get("rewards")
        for t in range(self.played, last + 1):
            yield t
            _, reward, terminated, truncated, _ = self.env.step(actions[t])
            self.played = t + 1
            if not self.check:
                continue
            if rewards is not None and float(reward) != float(rewards[t]):
                raise ReplayError(
                    f"{self._where()}: replay diverged at turn {t + 1} (reward {reward} vs "
                    f"recorded {rewards[t]}); was it made with another env, options or seed?"
                )
            if (terminated or truncated) and t < len(actions) - 1:
                raise ReplayError(
                    f"{self._where()}: the replay ended at turn {t + 1} but the record has "
                    f"{len(actions)} actions"
                )
        if self.check:
            self.assistant_indices()  # the conversation holds what was played

    def advance(self, turn: int) -> None:
        """Play the recorded actions until ``turn`` of them are played (0: the first state)."""
        if turn < self.played:
            raise ValueError(f"turn {turn} is behind the replay (at turn {self.played})")
        if turn > len(self.record["actions"]):
            raise ValueError(f"{self._where()} has only {len(self.record['actions'])} actions")
        if turn > self.played:
            for _ in self.turns(upto=turn - 1):
                pass

    def assistant_indices(self) -> list[int]:
        """Where the played actions sit in ``base.message_view()`` (checked)."""
        view = self.base.message_view()
        index = [i for i, m in enumerate(view) if m["role"] == "assistant"]
        index = index[len(index) - self.played :] if self.played else []
        played = self.actions[: self.played]
        if len(index) != self.played or [view[i]["content"] for i in index] != played:
            raise ReplayError(
                f"{self._where()}: the env's messages do not hold the recorded actions as its "
                "last assistant turns"
            )
        return index

    def conversation(self) -> tuple[list[dict[str, str]], list[int]]:
        """The messages up to the last played action, and each action's message index."""
        index = self.assistant_indices()
        cut = index[-1] + 1 if index else 0
        return self.base.messages()[:cut], index


class Replay:
    """Replays records on ONE env instance from ``make_env`` (closed by :meth:`close`).

    One wrapper stack is kept per :func:`stack_key`, so a file of many budgets replays on one
    env. Use as a context manager::

        with Replay(make_env) as replay:
            for episode in replay.episodes(records):
                for t in episode.turns():
                    state = episode.base.get_state()
    """

    def __init__(self, make_env: EnvFactory, *, check: bool = True) -> None:
        self.check = check
        self.raw = make_env()
        self.base = text_env_of(self.raw)
        self._stacks: dict[StackKey, gym.Env[str, str]] = {}

    def start(self, record: Mapping[str, Any], number: int = 0) -> EpisodeReplay:
        """Reset the record's stack to its first state (the injected prefix replayed)."""
        if record.get("task_id") is None or record.get("actions") is None:
            raise ReplayError(f"record {number} lacks 'task_id' or 'actions'")
        key = stack_key(record)
        if key not in self._stacks:
            self._stacks[key] = budget_stack(self.raw, *key)
        env = self._stacks[key]
        task_id = str(record["task_id"])
        _, info = env.reset(seed=record.get("seed"), options={"task_id": task_id})
        injection = record.get("error_injection") or None
        if self.check and injection:
            expected = list(injection.get("injected_actions") or [])
            if expected and list(info.get("injected_actions", [])) != expected:
                raise ReplayError(
                    f"record {number} ({task_id}): the replayed error injection differs from "
                    "the recorded one; was it made with another env or seed?"
                )
        return EpisodeReplay(number, record, env, self.base, dict(info), self.check)

    def episodes(self, records: Iterable[Mapping[str, Any]]) -> Iterator[EpisodeReplay]:
        """Each record, started; the previous one is abandoned when the next starts."""
        for number, record in enumerate(records):
            yield self.start(record, number)

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
