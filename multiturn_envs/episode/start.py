"""How a dataset row or a client payload starts an episode: :class:`EpisodeStart`, the one
reader of ``task_id``, ``seed``, ``max_turns``, ``budget_mode``, ``error_after`` and ``reward``.

Every edge where someone else's data names an episode reads it here: TRL's ``reset(**row)``,
SkyRL's ``extras``, verl's row (top level or ``extra_info``), verifiers' task data and the
server's reset payload. One reader means one set of names, one set of checks and one message
per mistake, whichever framework the row came through (inspect_ai's ``Sample`` plays this part
there; Gymnasium's ``reset(seed, options)`` is what it becomes).

The fields, each optional (absent: the env's own default, or the consumer's reward):

========================  ===================================================================
``task_id``               which task (a string; an int is read as its text)
``seed``                  the reset seed, an int in [0, 2**128)
``max_turns``             this episode's turn budget: a positive int; in a payload ``null``
                          means no budget at all, in a row ``None`` means "not given" (a
                          dataset's missing value)
``budget_mode``           ``"hidden"`` or ``"announced"``
``error_after``           error injection: k expert steps then one wrong action
                          (:class:`~multiturn_envs.wrappers.ErrorInjection`); an int, or
                          ``[lo, hi]`` drawn per reset
``reward``                a registered reward: its name or ``{"name": ..., **params}``
========================  ===================================================================

**The namespaced spelling.** Each field may also be written ``mt_<field>`` (``mt_max_turns``),
which wins over the plain one. A framework that owns a plain name (SkyRL overwrites
``extras["max_turns"]`` with its generator's cap) passes it in ``owned``, and only the
namespaced spelling is read there; a dataset written with ``mt_`` names works in every
framework alike.

The budget travels as reset options, so a row's budget applies to that episode only and wins
over the env's wrappers and defaults (:meth:`multiturn_envs.core.TextEnv.reset`).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from multiturn_envs.core import BUDGET_MODES, areset_env, check_budget
from multiturn_envs.rewards import Reward, make_reward
from multiturn_envs.wrappers.error_injection import MAX_PREFIX_STEPS, ErrorInjection

__all__ = [
    "ENV_DEFAULT",
    "FIELDS",
    "MAX_SEED",
    "NAMESPACE",
    "EnvDefault",
    "EpisodeStart",
]

FIELDS: tuple[str, ...] = ("task_id", "seed", "max_turns", "budget_mode", "error_after", "reward")
"""The fields a row or a payload may name (module docstring)."""
NAMESPACE = "mt_"
"""The prefix of a field's namespaced spelling (``mt_max_turns``)."""
MAX_SEED = 2**128
"""Seeds are ints in ``[0, MAX_SEED)`` (a training run's row seeds reach past 2**64)."""
MAX_TASK_ID_CHARS = 4096
"""A task id longer than this is refused (ids are names, not documents)."""


class EnvDefault(enum.Enum):
    """The type of :data:`ENV_DEFAULT`."""

    TOKEN = "env-default"

    def __repr__(self) -> str:
        return "ENV_DEFAULT"


ENV_DEFAULT = EnvDefault.TOKEN
"""``EpisodeStart.max_turns`` when the row names no budget: the env's own decides."""


def _integer(name: str, value: Any, *, low: int, high: int, what: str) -> int:
    """``value`` as an int (an int, a numpy integer, or a float with an integral value, as a
    dataframe stores an int column with gaps), or a ``ValueError`` saying ``what``."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if isinstance(value, float) and value.is_integer():
        ok, value = True, int(value)
    if ok and int(value) >= high:
        raise ValueError(f"{name} must be below {high:,}, got {value!r:.100}")
    if not ok or int(value) < low:
        raise ValueError(f"{name} must be {what}, got {value!r:.100}")
    return int(value)


def _error_after(value: Any) -> int | tuple[int, int]:
    what = f"an int in [0, {MAX_PREFIX_STEPS}] or a [lo, hi] pair of them"
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 2:
            raise ValueError(f"error_after must be {what}, got {value!r:.100}")
        lo, hi = (
            _integer("error_after", v, low=0, high=MAX_PREFIX_STEPS + 1, what=what) for v in value
        )
        if lo > hi:
            raise ValueError(f"error_after must be {what} with lo <= hi, got {value!r:.100}")
        return lo, hi
    return _integer("error_after", value, low=0, high=MAX_PREFIX_STEPS + 1, what=what)


@dataclass(frozen=True)
class EpisodeStart:
    """What starts one episode, read and checked (module docstring has the fields).

    Build one with :meth:`from_row` (a dataset row, a framework's extras) or
    :meth:`from_payload` (a served client's reset), start the episode with :meth:`reset` (or
    :meth:`areset` from an event loop), write one back with :meth:`row`.
    """

    task_id: str | None = None
    seed: int | None = None
    max_turns: int | EnvDefault | None = ENV_DEFAULT
    budget_mode: str | None = None
    error_after: int | tuple[int, int] | None = None
    reward: Reward | None = None

    def __post_init__(self) -> None:
        if self.task_id is not None and (
            not isinstance(self.task_id, str) or len(self.task_id) > MAX_TASK_ID_CHARS
        ):
            raise ValueError(
                f"task_id must be a string of at most {MAX_TASK_ID_CHARS} characters, "
                f"got {self.task_id!r:.100}"
            )
        if self.seed is not None:
            _integer("seed", self.seed, low=0, high=MAX_SEED, what="an int >= 0")
        if self.max_turns is not ENV_DEFAULT:
            check_budget(self.max_turns, "hidden")
        if self.budget_mode is not None and self.budget_mode not in BUDGET_MODES:
            raise ValueError(
                f"budget_mode must be one of {BUDGET_MODES}, got {self.budget_mode!r:.100}"
            )
        if self.error_after is not None:
            object.__setattr__(self, "error_after", _error_after(self.error_after))
        if self.reward is not None and not isinstance(self.reward, Reward):
            raise ValueError(f"reward must be a Reward (make_reward), got {self.reward!r:.100}")

    # ------------------------------------------------------------------ reading
    @classmethod
    def from_row(
        cls,
        row: Mapping[str, Any],
        *,
        owned: Collection[str] = (),
        fallback: Mapping[str, Any] | None = None,
    ) -> EpisodeStart:
        """Read a dataset row (or a framework's extras). A ``None`` value is a missing one.

        Args:
            row: the columns; those not in :data:`FIELDS` (``prompt``, ...) are ignored.
            owned: plain field names the framework uses for its own purpose (SkyRL:
                ``{"max_turns"}``): only their ``mt_`` spelling is read.
            fallback: where a field the row lacks is looked up next (verl's ``extra_info``).
        """
        return cls._read(row, owned=owned, fallback=fallback, payload=False)

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> EpisodeStart:
        """Read a served client's reset data (JSON). Here ``"max_turns": null`` asks for no
        budget at all; any other ``null`` is a field not given."""
        return cls._read(data, owned=(), fallback=None, payload=True)

    @classmethod
    def _read(
        cls,
        row: Mapping[str, Any],
        *,
        owned: Collection[str],
        fallback: Mapping[str, Any] | None,
        payload: bool,
    ) -> EpisodeStart:
        if not isinstance(row, Mapping):
            raise ValueError(f"an episode's row is a mapping of fields, got {type(row).__name__}")
        sources = [row] if not isinstance(fallback, Mapping) else [row, fallback]
        found: dict[str, Any] = {}
        for name in FIELDS:
            for source in sources:
                spellings = [NAMESPACE + name] + ([] if name in owned else [name])
                key = next((k for k in spellings if k in source), None)
                if key is None:
                    continue
                value = source[key]
                if value is not None:
                    found[name] = value
                    break
                if payload and name in ("max_turns", "budget_mode"):
                    found[name] = None  # a client's explicit null: checked as given
                    break
        return cls.of(**found)

    @classmethod
    def of(cls, **fields: Any) -> EpisodeStart:
        """An episode start from field values as a row holds them (a task id that is a
        number, a reward's name or spec, a budget of ``None`` meaning none): converted, then
        checked by the constructor."""
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise ValueError(f"an episode start takes {list(FIELDS)}, not {unknown[:10]}")
        task_id: Any = fields.get("task_id")
        if isinstance(task_id, int | np.integer) and not isinstance(task_id, bool):
            task_id = str(task_id)
        seed = fields.get("seed")
        if seed is not None:
            seed = _integer("seed", seed, low=0, high=MAX_SEED, what="an int >= 0")
        max_turns = fields.get("max_turns", ENV_DEFAULT)
        if isinstance(max_turns, float) and max_turns.is_integer():
            max_turns = int(max_turns)
        reward = fields.get("reward")
        if reward is not None:
            if not isinstance(reward, str | Mapping | Reward):
                raise ValueError(
                    f"reward must name a registered reward ('process' or {{'name': ..., "
                    f"**params}}); a column of another meaning needs another name, got "
                    f"{reward!r:.100}"
                )
            reward = make_reward(reward)
        if "budget_mode" in fields and fields["budget_mode"] is None:
            check_budget(None, None)  # a client's explicit null: the budget's own message
        return cls(
            task_id=task_id,
            seed=seed,
            max_turns=max_turns,
            budget_mode=fields.get("budget_mode"),
            error_after=fields.get("error_after"),
            reward=reward,
        )

    # ------------------------------------------------------------------ using
    def reward_or(self, default: Reward) -> Reward:
        """The row's reward, else ``default`` (the consumer's configured one)."""
        return default if self.reward is None else self.reward

    def budget(self, default: tuple[int | None, str]) -> tuple[int | None, str]:
        """The episode's ``(max_turns, budget_mode)`` given the env's ``default`` budget,
        checked together (an announced budget needs a number of turns)."""
        max_turns = default[0] if self.max_turns is ENV_DEFAULT else self.max_turns
        mode = default[1] if self.budget_mode is None else self.budget_mode
        return check_budget(max_turns, mode)

    def options(self, base: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The reset options this start names, over ``base`` (a client's own ``options``);
        ``None`` when there are none, as a reset without options."""
        out = dict(base or {})
        if self.task_id is not None:
            out["task_id"] = self.task_id
        if self.max_turns is not ENV_DEFAULT:
            out["max_turns"] = self.max_turns
        if self.budget_mode is not None:
            out["budget_mode"] = self.budget_mode
        return out or None

    def reset(
        self, env: gym.Env[str, str], options: Mapping[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start the episode on ``env``: its first observation and ``info``.

        With ``error_after``, the episode starts in an error state through an
        :class:`~multiturn_envs.wrappers.ErrorInjection` layered on ``env`` for this reset
        (its ``info`` says what was injected); without a seed it takes one from the state of
        the env's own generator (read, not drawn), so a replayed sequence of resets injects the
        same errors.
        """
        target, seed = self._target(env)
        return target.reset(seed=seed, options=self.options(options))

    async def areset(
        self, env: gym.Env[str, str], options: Mapping[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """:meth:`reset` from an event loop (an env that waits on I/O resets in a thread)."""
        target, seed = self._target(env)
        return await areset_env(target, seed=seed, options=self.options(options))

    def _target(self, env: gym.Env[str, str]) -> tuple[gym.Env[str, str], int | None]:
        if self.error_after is None:
            return env, self.seed
        layer: Any = env
        while isinstance(layer, gym.Wrapper):
            if isinstance(layer, ErrorInjection):
                raise ValueError(
                    "the env already injects errors (an ErrorInjection wrapper): name "
                    "error_after in one place, the row or the env"
                )
            layer = layer.env
        seed = self.seed
        if seed is None:  # read, not drawn: the env's generator is not advanced here
            state = repr(env.unwrapped.np_random.bit_generator.state).encode()
            seed = int.from_bytes(hashlib.blake2b(state, digest_size=8).digest(), "big")
        return ErrorInjection(env, after_expert_steps=self.error_after), seed

    # ------------------------------------------------------------------ writing
    def row(self, *, names: Literal["plain", "namespaced"] = "plain") -> dict[str, Any]:
        """The fields this start names, as a row's columns (``names="namespaced"``: the
        ``mt_`` spellings, for a framework that owns a plain name)."""
        out: dict[str, Any] = {}
        if self.task_id is not None:
            out["task_id"] = self.task_id
        if self.seed is not None:
            out["seed"] = self.seed
        if self.max_turns is not ENV_DEFAULT:
            out["max_turns"] = self.max_turns
        if self.budget_mode is not None:
            out["budget_mode"] = self.budget_mode
        if self.error_after is not None:
            out["error_after"] = (
                list(self.error_after) if isinstance(self.error_after, tuple) else self.error_after
            )
        if self.reward is not None:
            out["reward"] = self.reward.spec()
        if names == "namespaced":
            return {NAMESPACE + k: v for k, v in out.items()}
        return out
